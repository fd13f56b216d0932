// LD_PRELOAD diagnostic: report every pthread_exit (thread id, name, native backtrace) on stderr, then exit.
// CPython 3.11 calls pthread_exit from PyThread_exit_thread when a thread takes the GIL during finalization.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <execinfo.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

void pthread_exit(void* retval) {
  static void (*real)(void*) __attribute__((noreturn));
  if (!real) real = (void (*)(void*))dlsym(RTLD_NEXT, "pthread_exit");
  char name[32] = {0};
  pthread_getname_np(pthread_self(), name, sizeof name);
  char line[128];
  int n = snprintf(line, sizeof line, "pthread_exit_spy: thread %ld (%s) calls pthread_exit\n", (long)syscall(SYS_gettid), name);
  write(2, line, n);
  void* frames[64];
  int depth = backtrace(frames, 64);
  backtrace_symbols_fd(frames, depth, 2);
  real(retval);
}
