/*
 * test_ckpt_fs.c — a checkpoint directory on the filesystem, one process:
 *  - kill points: a child saves and is killed (ZINC_CKPT_CRASH_AT=N, SIGKILL
 *    at the save's N-th step of publishing) at every point in turn, with
 *    RENAME_EXCHANGE (where the filesystem has it) and without
 *    (ZINC_FS_NO_EXCHANGE=1, as on NFS): after every kill `latest` opens and
 *    every checksum verifies, and its values are the previous complete save
 *    or the new one; the crashes chain (each starts from what the last one
 *    left) and a final save completes and becomes latest; the trainer's
 *    blob (client state) saved with each is always the one of the save
 *    latest names;
 *  - tags: "latest", "latest.tmp", "x.old", "x.partial", trailing or
 *    leading spaces, a slash, a leading dot are refused with
 *    ZINC_ERR_INVALID naming the tag and the rule; nothing is created and
 *    the engine goes on;
 *  - a user's directory named like the tag that is not a zinc checkpoint
 *    is refused and left whole;
 *  - a symbolic link named latest.tmp, or <export>.tmp, does not make a
 *    save or an export write through it;
 *  - .partial directories left by a killed save are removed by the next
 *    save of the directory, a user's directory named like one is not.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ckpt_test.h"

/* The save number the blob of dir/latest names; -1 when it is missing or
 * does not match the manifest's size. */
static int saved_blob(const char *dir) {
  zinc_ckpt_dir *d = NULL;
  if (zinc_ckpt_dir_open(dir, NULL, &d) != ZINC_OK)
    return -1;
  char path[1024], text[64] = {0};
  snprintf(path, sizeof path, "%s/client_state.bin", d->path);
  FILE *f = fopen(path, "rb");
  size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
  if (f)
    fclose(f);
  int value = -1;
  if ((int64_t)n != d->manifest->client_state_bytes || sscanf(text, "blob of save %d", &value) != 1)
    value = -1;
  zinc_ckpt_dir_close(d);
  return value;
}

/* A child saves `value` as tag; killed at publishing step `at` (0: not). */
static int save_in_child(const char *dir, const char *tag, int value, int at, int no_exchange) {
  pid_t pid = fork();
  if (pid == 0) {
    char spec[16];
    snprintf(spec, sizeof spec, "%d", at);
    if (at > 0)
      setenv("ZINC_CKPT_CRASH_AT", spec, 1);
    if (no_exchange)
      setenv("ZINC_FS_NO_EXCHANGE", "1", 1);
    zinc_param *p;
    zinc_engine *e = open_engine(&p, 64, 96);
    char blob[32];
    snprintf(blob, sizeof blob, "blob of save %d", value);
    if (!e || set_values(e, p, value) != 0 ||
        zinc_checkpoint_set_client_state(e, blob, strlen(blob)) != ZINC_OK)
      _exit(3);
    zinc_status st = zinc_save_checkpoint(e, dir, tag);
    if (st != ZINC_OK)
      fprintf(stderr, "child save: %s\n", zinc_last_error());
    zinc_engine_destroy(e);
    _exit(st == ZINC_OK ? 0 : 2);
  }
  int status;
  waitpid(pid, &status, 0);
  if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
    return 1; /* killed */
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

static void test_kill_points(const char *root, int no_exchange) {
  char dir[700];
  snprintf(dir, sizeof dir, "%s/kill_%s", root, no_exchange ? "fallback" : "exchange");
  const char *tags[2] = {"same", "other"};
  int committed = 1;
  CHECK(save_in_child(dir, "same", 1, 0, no_exchange) == 0, "the first save failed");
  int value = 2, kills = 0;
  /* re-saving a tag (exchange or fallback), then a new tag, then back */
  for (int round = 0; round < 3; round++) {
    const char *tag = tags[round % 2 == 0 ? 0 : 1];
    for (int at = 1; at < 40; at++, value++) {
      int r = save_in_child(dir, tag, value, at, no_exchange);
      CHECK(r >= 0, "%s: save of %s (kill point %d) failed", dir, tag, at);
      int got = saved_value(dir, NULL);
      CHECK(got == committed || got == value, "%s: killed at point %d of a save of %s: latest "
            "holds %d, expected %d or %d", dir, at, tag, got, committed, value);
      int blob = saved_blob(dir);
      CHECK(blob == got, "%s: killed at point %d of a save of %s: latest holds the values of "
            "save %d and the blob of save %d", dir, at, tag, got, blob);
      if (got == value)
        committed = value;
      if (r == 0) /* the save ran past its last kill point */
        break;
      kills++;
    }
    /* a complete save of the same tag */
    value++;
    CHECK(save_in_child(dir, tag, value, 0, no_exchange) == 0, "%s: save after the kills of %s "
          "failed", dir, tag);
    CHECK(saved_value(dir, NULL) == value && saved_value(dir, tag) == value,
          "%s: the save after the kills is not latest", dir);
    committed = value++;
  }
  printf("%s: %d kills, latest always complete\n", no_exchange ? "without RENAME_EXCHANGE"
                                                              : "with RENAME_EXCHANGE", kills);
}

static int exists(const char *path) {
  struct stat sb;
  return lstat(path, &sb) == 0;
}

static void test_tags_and_paths(const char *root) {
  char dir[700], p1[900], p2[900];
  snprintf(dir, sizeof dir, "%s/tags", root);
  zinc_param *p;
  zinc_engine *e = open_engine(&p, 64, 96);
  CHECK(e && set_values(e, p, 5) == 0, "engine");
  if (!e)
    return;
  CHECK(zinc_save_checkpoint(e, dir, "good") == ZINC_OK, "save: %s", zinc_last_error());
  static const char *bad[] = {"latest", "latest.tmp", "x.old", "x.partial", "x.tmp", "x ",
                              " x", "a/b", ".hidden", "", "x\ny"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    zinc_status st = zinc_save_checkpoint(e, dir, bad[i]);
    CHECK(st == ZINC_ERR_INVALID && strstr(zinc_last_error(), "tag") &&
          (!bad[i][0] || strstr(zinc_last_error(), bad[i])) && strstr(zinc_last_error(), "must"),
          "tag \"%s\": %s \"%s\" (expected ZINC_ERR_INVALID naming the tag and the rule)",
          bad[i], zinc_status_name(st), zinc_last_error());
  }
  CHECK(saved_value(dir, NULL) == 5, "a refused tag changed latest");
  /* a user's directory named like the tag */
  snprintf(p1, sizeof p1, "%s/mine", dir);
  snprintf(p2, sizeof p2, "%s/mine/precious.txt", dir);
  mkdir(p1, 0755);
  FILE *f = fopen(p2, "w");
  fputs("keep me\n", f);
  fclose(f);
  char theirs[900]; /* and a directory of theirs named like the tag's temporary */
  snprintf(theirs, sizeof theirs, "%s/.mine.partial", dir);
  mkdir(theirs, 0755);
  zinc_status st = zinc_save_checkpoint(e, dir, "mine");
  CHECK(exists(theirs), "a refused save removed %s", theirs);
  CHECK(st == ZINC_ERR_INVALID && strstr(zinc_last_error(), p1) &&
        strstr(zinc_last_error(), "not a zinc checkpoint"),
        "save over a user's directory: %s \"%s\"", zinc_status_name(st), zinc_last_error());
  CHECK(exists(p2), "a save removed %s", p2);
  /* a symbolic link named latest.tmp */
  char victim[900];
  snprintf(victim, sizeof victim, "%s/victim.txt", root);
  f = fopen(victim, "w");
  fputs("victim\n", f);
  fclose(f);
  snprintf(p1, sizeof p1, "%s/latest.tmp", dir);
  CHECK(symlink(victim, p1) == 0, "symlink %s", p1);
  CHECK(set_values(e, p, 6) == 0, "set");
  st = zinc_save_checkpoint(e, dir, "good");
  CHECK(st == ZINC_OK, "save with a symlink named latest.tmp: %s", zinc_last_error());
  char buf[64] = "";
  f = fopen(victim, "r");
  CHECK(f && fgets(buf, sizeof buf, f) && !strcmp(buf, "victim\n"),
        "the save wrote through the symlink latest.tmp into %s: \"%s\"", victim, buf);
  if (f)
    fclose(f);
  CHECK(saved_value(dir, NULL) == 6, "latest after the symlink is not the new save");
  /* a symbolic link named <export>.tmp */
  snprintf(p1, sizeof p1, "%s/weights.safetensors", root);
  snprintf(p2, sizeof p2, "%s/weights.safetensors.tmp", root);
  CHECK(symlink(victim, p2) == 0, "symlink %s", p2);
  st = zinc_export_safetensors(e, p1, -1);
  CHECK(st == ZINC_OK, "export with a symlink named .tmp: %s", zinc_last_error());
  f = fopen(victim, "r");
  CHECK(f && fgets(buf, sizeof buf, f) && !strcmp(buf, "victim\n"),
        "the export wrote through the symlink %s into %s", p2, victim);
  if (f)
    fclose(f);
  /* .partial directories: zinc's own (left by a killed save) and a user's */
  CHECK(save_in_child(dir, "killed", 9, 2, 0) == 1, "the save to kill was not killed");
  snprintf(p1, sizeof p1, "%s/.killed.partial", dir);
  CHECK(exists(p1), "the killed save left no %s (kill point 2 is after it is created)", p1);
  snprintf(p2, sizeof p2, "%s/.users.partial", dir);
  mkdir(p2, 0755);
  snprintf(victim, sizeof victim, "%s/.users.partial/notes.txt", dir);
  f = fopen(victim, "w");
  fputs("mine\n", f);
  fclose(f);
  CHECK(zinc_save_checkpoint(e, dir, "good") == ZINC_OK, "save: %s", zinc_last_error());
  CHECK(!exists(p1), "the next save left %s", p1);
  CHECK(exists(victim), "the next save removed a user's %s", victim);
  zinc_engine_destroy(e);
}

int main(int argc, char **argv) {
  const char *base = getenv("ZINC_TEST_BINARY_DIR") ? getenv("ZINC_TEST_BINARY_DIR") : "/tmp";
  const char *only = argc > 1 ? argv[1] : "kft";
  char root[512], cmd[1200];
  snprintf(root, sizeof root, "%s/ckpt_fs", base);
  snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s", root, root);
  if (system(cmd) != 0)
    return 1;
  if (strchr(only, 'k'))
    test_kill_points(root, 0);
  if (strchr(only, 'f'))
    test_kill_points(root, 1);
  if (strchr(only, 't'))
    test_tags_and_paths(root);
  if (failures == 0) {
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    if (system(cmd) != 0)
      return 1;
  }
  printf(failures ? "checkpoint filesystem tests FAILED\n" : "checkpoint filesystem tests "
                                                             "passed\n");
  return failures ? 1 : 0;
}
