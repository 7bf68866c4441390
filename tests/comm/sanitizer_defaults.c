/*
 * sanitizer_defaults.c — sanitizer settings every MPI test needs, linked
 * into each comm test (harmless in builds without sanitizers: nothing calls
 * these hooks then).
 *
 *  - AddressSanitizer/LeakSanitizer: Open MPI unloads its plugins at
 *    MPI_Finalize, so the fast unwinder's two-frame stacks of the memory it
 *    keeps for the life of the process end in "<unknown module>" and no
 *    `leak:libmpi.so` suppression matches them. Full unwinding at malloc
 *    time keeps the libmpi frames in the stacks (measured: a bare
 *    MPI_Init/MPI_Finalize program reports 116 KB of leaks without it,
 *    none with it).
 *  - ThreadSanitizer: Open MPI's own reports (lock-order inversion inside
 *    the tcp BTL at MPI_Init, "unlock of an unlocked mutex" in pml ob1 at
 *    MPI_Finalize) appear in a bare MPI program too; tests/tsan.supp covers
 *    only races, so these add to it.
 * The options set here are defaults: LSAN_/ASAN_/TSAN_OPTIONS from the
 * environment still override them key by key.
 */
const char *__asan_default_options(void);
const char *__lsan_default_options(void);
const char *__tsan_default_suppressions(void);

const char *__asan_default_options(void) { return "fast_unwind_on_malloc=0"; }
const char *__lsan_default_options(void) { return "fast_unwind_on_malloc=0"; }
const char *__tsan_default_suppressions(void) {
  return "deadlock:mca_btl_tcp.so\n"
         "deadlock:libopen-pal.so\n"
         "deadlock:libmpi.so\n"
         "mutex:mca_pml_ob1.so\n"
         "mutex:libopen-pal.so\n"
         "mutex:libmpi.so\n";
}
