/* replay.c — runs the fuzz entry point over files named on the command
 * line (the seed corpus, crash reproducers); used when libFuzzer is not
 * built. Exit 0 when every input was handled. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    FILE *f = fopen(argv[i], "rb");
    if (!f) {
      fprintf(stderr, "cannot open %s\n", argv[i]);
      return 1;
    }
    static uint8_t buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    LLVMFuzzerTestOneInput(buf, n);
    printf("replayed %s (%zu bytes)\n", argv[i], n);
  }
  return 0;
}
