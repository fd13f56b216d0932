// jarp's launch guard for bounds-checked kernels (built at first use by jarp/warp/_ffi/_native/_guard.py with the Clang
// in the warp-lang wheel, like the native handler; no C library headers are needed).
//
// A kernel built in Warp's debug mode checks every array index; on the CPU a failed check calls Warp's
// _wp_assert, which prints the check and traps (SIGILL or SIGTRAP), then aborts (SIGABRT): the process dies. The
// guard calls the kernel's entry point with handlers for those signals installed, and a handler jumps back out
// of the kernel, so the launch returns the signal number instead. Guarded calls are serialised by the caller
// (one jump buffer), and the previous handlers are restored after each call.
extern "C" {
typedef void (*jarp_handler_t)(int);
jarp_handler_t signal(int, jarp_handler_t);
int __sigsetjmp(void* env, int savemask);
void siglongjmp(void* env, int val) __attribute__((noreturn));
}

namespace {
alignas(64) char env[512];  // a sigjmp_buf (200 bytes on x86-64 and aarch64 glibc), with room to spare
volatile int armed = 0;
const int kSignals[3] = {4, 5, 6};  // SIGILL, SIGTRAP, SIGABRT on Linux

void on_signal(int sig) {
    if (armed) {
        armed = 0;
        siglongjmp(env, sig);
    }
}
}  // namespace

extern "C" int jarp_guarded_call(void* fn, void* bounds, void* args, void* adjoint_args) {
    jarp_handler_t previous[3];
    for (int i = 0; i < 3; ++i) previous[i] = signal(kSignals[i], on_signal);
    int caught = __sigsetjmp(env, 1);
    if (caught == 0) {
        armed = 1;
        if (adjoint_args)
            reinterpret_cast<void (*)(void*, void*, void*)>(fn)(bounds, args, adjoint_args);
        else
            reinterpret_cast<void (*)(void*, void*)>(fn)(bounds, args);
        armed = 0;
    }
    for (int i = 0; i < 3; ++i) signal(kSignals[i], previous[i]);
    return caught;
}
