// jarp's native XLA FFI handler: launch a prepared Warp kernel plan without Python.
//
// Built at first use by jarp/warp/_ffi/_native/_build.py with the Clang that ships in the warp-lang wheel
// (the compiler Warp builds every CPU kernel with), against jaxlib's own XLA FFI header, so the
// call frame is read through the header's declarations, not through offsets written by hand.
// Only freestanding headers are needed; _build.py provides <stddef.h> and <stdint.h>.
//
// Each jarp call names its launch by content (a description attribute), never by a process-local handle,
// so a compiled program means the same in any process. XLA runs the instantiate stage once per loaded
// executable: the handler asks jarp's Python side to resolve the description to a plan handle (rebuilding
// the plan if this process never traced it) and keeps the handle, with the lease that keeps the plan
// registered, as the call's XLA FFI state; the state's deleter (run when XLA destroys the executable)
// queues the lease for release. Every execution reads its handle from that state.
//
// Python prepares one immutable launch descriptor per (plan handle, device) and publishes it in a
// two-level table (chunks of handles x device slots). The handler reads the table with acquire loads,
// no lock and no GIL. Anything it does not recognise exactly (a frame another process or a
// hand-written ffi_call made, a plan with no descriptor yet, a callable, a buffer that does not match)
// goes to the Python callback, which checks the frame in full, builds what is missing (and publishes it)
// or answers with an XLA FFI error naming what was wrong. The handler never reports a mismatch
// itself, so the messages stay in one place.

#include "xla/ffi/api/c_api.h"

static_assert(XLA_FFI_API_MAJOR == 0, "jarp's native handler is written for XLA FFI API 0.x");
static_assert(sizeof(void*) == 8, "jarp's native handler needs a 64-bit target");

extern "C" void* memset(void* dst, int value, size_t n);
extern "C" void* memcpy(void* dst, const void* src, size_t n);
extern "C" void* malloc(size_t n);
extern "C" void free(void* p);
// The id of jarp's state type; XLA assigns it when jarp registers the type (`jax.ffi.register_ffi_type`).
extern "C" XLA_FFI_TypeId jarp_state_type;

namespace {

// ---- the launch descriptor (mirrored by _abi.Descriptor; offsets checked at load) ----

struct BufferSpec {  // what a call's buffer must be
  int64_t dtype;     // XLA_FFI_DataType
  int64_t rank;
  const int64_t* dims;
};

struct PointerSlot {       // a pointer word of an argument block, patched per call (and per batch slice)
  int64_t block;           // 0: primal argument block, 1: adjoint argument block
  int64_t word;            // 8-byte word index in the block
  int64_t source;          // 0: the frame's arguments, 1: its results
  int64_t index;           // buffer index
  const int64_t* offsets;  // byte offset of each batch slice (nslices entries)
};

struct CopySpec {  // an in-out operand copied to its result first (a partitioned call keeps no aliases)
  int64_t arg;
  int64_t ret;
  int64_t nbytes;
};

struct ZeroFill {  // a result zeroed before the launch
  int64_t index;
  int64_t nbytes;
};

struct KernelParam {  // CUDA: where a kernel parameter lives (block 0/1 and byte offset, block 2: the bounds)
  int64_t block;
  int64_t offset;
};

struct PrivateSpec {  // an accumulated result a split launch gives each work item a zeroed copy of (Plan.private)
  int64_t slot;    // the pointer slot (index into Descriptor::slots) to point at the item's copy
  int64_t op;      // how copies combine: 0 sum, 1 minimum, 2 maximum
  int64_t scalar;  // the element's scalar: 0 float32, 1 float64, 2 int32, 3 int64, 4 uint32, 5 uint64
  int64_t nbytes;  // bytes of one batch slice of the result
};

struct Measure {  // what the handler learns of a launch it runs whole (written by the handler, atomically)
  int64_t cost_ns;  // the fastest whole single-threaded launch seen (0: none yet)
  int64_t samples;  // how many were timed
};

constexpr int64_t kKept = 4;  // meshes kept per structure: one program may call one plan on several topologies

struct StructState {  // the Warp structures the handler keeps between calls (memory owned by Python)
  int64_t busy;       // 1 while one call builds or refits one and launches with it (taken with an atomic exchange)
  int64_t clock;      // calls served, to find the least recently used
  uint64_t id[kKept];     // Warp's ids (0: none); destroyed by Python with the descriptor. A BVH keeps one.
  int64_t used[kKept];    // when each was last used
  void* own[kKept + 1];   // mesh: each one's int32 indices, then zero velocities for a mesh given none;
                          // BVH: the private copies of its lower and upper bounds
};

struct StructSpec {     // (CPU) a Warp structure built or refitted from the call's buffers before the launch
  int64_t kind;         // 0: wp.Mesh (points, indices, velocities), 1: wp.Bvh (lowers, uppers)
  int64_t word;         // the word of the primal argument block that takes its id
  int64_t arg[3];       // the frame arguments it is built from (-1: none; a mesh without velocities)
  int64_t count;        // points (mesh) or boxes (BVH)
  int64_t nindices;     // mesh: three per triangle
  int64_t index_type;   // mesh: the index buffer's scalar: 0 int32, 1 int64, 2 uint32, 3 uint64
  int64_t winding;      // mesh: support_winding_number
  int64_t constructor;  // Warp's BVH constructor (BVH_CONSTRUCTOR_*, resolved for the CPU)
  int64_t leaf_size;
  StructState* state;      // one per batch slice (each slice builds its own); state[0].busy guards them all
  const int64_t* offsets;  // the byte offset of each of the three buffers in each batch slice (3 per slice)
};

struct Descriptor {
  int64_t nargs;
  int64_t nrets;
  const BufferSpec* args;
  const BufferSpec* rets;
  int64_t nzero;
  const ZeroFill* zero;
  int64_t launch;   // 0: nothing to launch (an empty launch grid), 1: launch
  int64_t nslices;  // batch slices launched one after another
  int64_t nblocks;  // 1 (forward) or 2 (adjoint: primal and adjoint argument blocks)
  int64_t block_bytes[2];
  const void* templates[2];
  int64_t nslots;
  const PointerSlot* slots;
  const void* bounds;  // wp::launch_bounds_t
  void* entry;         // CPU: the forward or backward entry point; CUDA: the CUfunction
  // CUDA only: the arguments of Warp's wp_cuda_launch_kernel
  void* context;
  int64_t dim;
  int64_t block_dim;
  int64_t grid_stride;
  int64_t cluster_dim;
  int64_t smem_bytes;
  int64_t nparams;
  const KernelParam* params;
  const char* failure;  // how a failed CUDA launch or memset begins its message (Warp's diagnosis follows)
  // CPU threads (see run_on_pool): 0 for CUDA and for launches that must stay on the calling thread
  int64_t concurrent;   // 1: the batch slices write disjoint memory and share no state, so may run concurrently
  void* range_entry;    // jarp's ranged entry (forward or backward, as `entry`), or null: never split a launch
  int64_t tasks;        // the launch's thread count (the launch bounds' size)
  int64_t ncopies;
  const CopySpec* copies;
  int64_t nprivate;               // accumulated results copied per work item of a split launch (with range_entry)
  const PrivateSpec* private_specs;
  Measure* measure;               // (CPU, with range_entry) the launch's measured cost, for the work threshold
  int64_t work;                   // (CPU) a static estimate of one slice's work: threads x statements per thread
  int64_t nstructs;               // (CPU, one slice, launched whole) Warp structures built inside the call
  const StructSpec* structs;
};

// ---- the table ----

constexpr int64_t kChunkHandles = 256;
constexpr int64_t kMaxChunks = 1 << 14;  // 4,194,304 handles; beyond, plans take the Python path
constexpr int64_t kDeviceSlots = 17;     // the CPU and 16 CUDA ordinals

Descriptor** g_chunks[kMaxChunks];

typedef XLA_FFI_Error* (*SlowPath)(XLA_FFI_CallFrame*, int64_t);  // the frame, and its plan handle or -1
typedef XLA_FFI_Error* (*Resolve)(XLA_FFI_CallFrame*, int64_t*);
typedef size_t (*CudaLaunch)(void*, void*, size_t, int, int, int, int, int, void**, void*, const void*);
typedef bool (*CudaMemset)(void*, void*, int, size_t, void*);
typedef bool (*CudaMemcpy)(void*, void*, void*, size_t, void*);
typedef const char* (*ErrorString)();
typedef void (*CpuForward)(const void*, void*);
typedef void (*CpuBackward)(const void*, void*, void*);
typedef void (*CpuRange)(const void*, void*, size_t, size_t);
typedef void (*CpuBackwardRange)(const void*, void*, void*, size_t, size_t);
extern "C" int sched_yield(void);
struct jarp_timespec {
  long tv_sec;
  long tv_nsec;
};
extern "C" int clock_gettime(int clock, jarp_timespec* ts);
#if defined(__APPLE__)
constexpr int kMonotonic = 6;
#else
constexpr int kMonotonic = 1;  // CLOCK_MONOTONIC on Linux
#endif
int64_t now_ns() {
  jarp_timespec ts{0, 0};
  clock_gettime(kMonotonic, &ts);
  int64_t t = static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
  return t == 0 ? 1 : t;  // 0 means "not timed"
}

SlowPath g_slow[4];  // [platform * 2 + graph]
Resolve g_resolve[4];  // [platform * 2 + graph]: the instantiate stage's Python side
CudaLaunch g_cuda_launch;
CudaMemset g_cuda_memset;
CudaMemcpy g_cuda_memcpy;
ErrorString g_error_string;  // Warp's wp_get_error_string: why its last CUDA call failed
// Warp's host functions for the structures a call builds (jarp_configure_structures; null until then)
struct WarpArray {  // wp::array_t<T> (warp/native/array.h), passed by value as Warp's host functions take it
  void* data;
  void* grad;
  int32_t shape[4];
  int32_t strides[4];
  uint16_t ndim;
  uint16_t flags;
};
typedef uint64_t (*MeshCreate)(WarpArray, WarpArray, WarpArray, int, int, int, int, int*, int);
typedef void (*MeshSet)(uint64_t, WarpArray);
typedef void (*IdFunction)(uint64_t);
typedef uint64_t (*BvhCreate)(void*, void*, int, int, int*, int);
MeshCreate g_mesh_create;
MeshSet g_mesh_set_points;
MeshSet g_mesh_set_velocities;
IdFunction g_mesh_destroy;
BvhCreate g_bvh_create;
IdFunction g_bvh_refit;
IdFunction g_bvh_destroy;
int64_t g_structure_builds;  // structures built and refitted (for tests and inspection, as the Python path counts)
int64_t g_structure_refits;
// Interpreter exit (jarp's atexit hook): once g_exiting is set, no frame goes to the Python callback, and the
// hook waits until g_in_python (the calls already inside it) drains. A worker thread that takes the GIL after
// CPython's finalization began is ended by CPython (pthread_exit), which leaves XLA's CPU client waiting for
// it forever when it is destroyed: the process hangs at exit.
int64_t g_exiting;
int64_t g_in_python;

// CPU threads. Every value below is set by jarp_set_threads from jarp/warp/_ffi/_threads.py (its thresholds and
// the user's settings; the one place they are defined) when the handler is loaded, before any call, and again on
// every change of a setting; until then a call stays on the calling thread. They are: the most threads one call uses
// (0: as many as XLA's pool has; 1: the calling thread only), the fewest tasks (launch threads times batch slices)
// a call must have before it goes to the pool at all (below, the pool's dispatch would cost more than it saves:
// small launches keep their marginal cost), and the fewest tasks in one index range of a split launch.
int64_t g_max_threads = 1;
int64_t g_min_tasks;
int64_t g_min_range = 1;
// The work threshold: a launch whose whole single-threaded run took at least g_min_cost_ns splits however few
// its tasks, in ranges of about g_item_ns each (at least one task); and the most bytes the private copies of one
// split launch may take (above, fewer ranges; below two, the launch stays whole).
int64_t g_min_cost_ns;
int64_t g_item_ns = 1;
int64_t g_private_cap;
// A helper that runs out of items waits up to g_linger_ns for the next split call before it gives its pool thread
// back (see linger).
int64_t g_linger_ns;
// Counters for tests and inspection: calls run as several work items on the pool, work items run in all, and
// calls a lingering helper joined.
int64_t g_pool_calls;
int64_t g_pool_items;
int64_t g_pool_joins;

// ---- the per-executable state: a plan handle and the lease that keeps it registered ----

struct State {
  int64_t handle;
  int64_t lease;  // the Python side's lease id, released once XLA deletes the state
  State* next;    // in the release queue
};

State* g_released;                  // a lock-free stack of deleted states, drained by Python

void delete_state(void* object) {  // XLA_FFI_TypeInfo's deleter: any thread, any time, no Python
  State* state = static_cast<State*>(object);
  State* head = __atomic_load_n(&g_released, __ATOMIC_ACQUIRE);
  do {
    state->next = head;
  } while (!__atomic_compare_exchange_n(&g_released, &head, state, true, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE));
}

inline Descriptor* lookup(int64_t handle, int64_t slot) {
  if (handle < 0 || handle >= kChunkHandles * kMaxChunks) return nullptr;
  Descriptor** chunk = __atomic_load_n(&g_chunks[handle / kChunkHandles], __ATOMIC_ACQUIRE);
  if (chunk == nullptr) return nullptr;
  return __atomic_load_n(&chunk[(handle % kChunkHandles) * kDeviceSlots + slot], __ATOMIC_ACQUIRE);
}

inline bool same_buffer(const XLA_FFI_Buffer* b, const BufferSpec& spec) {
  if (b->dtype != spec.dtype || b->rank != spec.rank) return false;
  for (int64_t k = 0; k < spec.rank; ++k)
    if (b->dims[k] != spec.dims[k]) return false;
  return true;
}

XLA_FFI_Error* error(XLA_FFI_CallFrame* frame, XLA_FFI_Error_Code code, const char* message) {
  XLA_FFI_Error_Create_Args args;
  args.struct_size = XLA_FFI_Error_Create_Args_STRUCT_SIZE;
  args.extension_start = nullptr;
  args.message = message;
  args.errc = code;
  return frame->api->XLA_FFI_Error_Create(&args);
}

// Append `src` to the message `dst` holds `n` characters of (at most `cap` - 1 in all); return its new length.
inline size_t append(char* dst, size_t n, size_t cap, const char* src) {
  while (src != nullptr && *src != '\0' && n + 1 < cap) dst[n++] = *src++;
  dst[n] = '\0';
  return n;
}

// A failed CUDA launch or memset: the descriptor's message (Warp's, for this kernel), what failed, and Warp's
// diagnosis of its last CUDA error, as wp.launch reports it. XLA_FFI_Error_Create copies the message (into an
// absl::Status), so it can be built on the stack.
XLA_FFI_Error* cuda_failure(XLA_FFI_CallFrame* frame, const Descriptor* d, const char* what) {
  char message[4096];
  size_t n = append(message, 0, sizeof(message), d->failure);
  n = append(message, n, sizeof(message), what);
  const char* why = g_error_string != nullptr ? g_error_string() : nullptr;
  if (why != nullptr && *why != '\0') {
    n = append(message, n, sizeof(message), ": ");
    n = append(message, n, sizeof(message), why);
  }
  append(message, n, sizeof(message), " (jarp's native launch)");
  return error(frame, XLA_FFI_Error_Code_INTERNAL, message);
}

bool answer_metadata(XLA_FFI_CallFrame* frame, bool graph, bool stateful = true) {
  XLA_FFI_Extension_Base* ext = frame->extension_start;
  if (ext->type != XLA_FFI_Extension_Metadata) return false;
  XLA_FFI_Metadata* meta = reinterpret_cast<XLA_FFI_Metadata_Extension*>(ext)->metadata;
  // The oldest version whose frame this handler reads (as jarp's Python callback answers).
  meta->api_version.major_version = 0;
  meta->api_version.minor_version = 1;
  meta->traits = graph ? XLA_FFI_HANDLER_TRAITS_COMMAND_BUFFER_COMPATIBLE : 0;
  if (stateful) meta->state_type_id = jarp_state_type;
  return true;
}

// Pass a frame to jarp's Python callback, unless the interpreter is exiting (then the call fails with an error).
// The increment comes before the check (both sequentially consistent), and the exit hook sets g_exiting before
// it reads g_in_python: either the hook sees this call and waits for it, or this call sees the flag.
template <typename F>
XLA_FFI_Error* python(XLA_FFI_CallFrame* frame, F call) {
  __atomic_add_fetch(&g_in_python, 1, __ATOMIC_SEQ_CST);
  if (__atomic_load_n(&g_exiting, __ATOMIC_SEQ_CST)) {
    __atomic_sub_fetch(&g_in_python, 1, __ATOMIC_SEQ_CST);
    return error(frame, XLA_FFI_Error_Code_CANCELLED,
                 "jarp: the Python interpreter is exiting, so this kernel call (which needs jarp's Python "
                 "callback) was not run; wait for the results you need before the script ends");
  }
  XLA_FFI_Error* result = call();
  __atomic_sub_fetch(&g_in_python, 1, __ATOMIC_SEQ_CST);
  return result;
}

XLA_FFI_Error* python(SlowPath slow, XLA_FFI_CallFrame* frame, int64_t handle = -1) {
  return python(frame, [&] { return slow(frame, handle); });
}


// ---- CPU threads: batch slices and index ranges on XLA's intra-op pool ----

// The floating-point control state of the calling thread (XLA runs its CPU computations with subnormals flushed),
// which every helper thread takes on for the work items it runs, so a split launch rounds exactly as one thread.
struct FpState {
#if defined(__x86_64__)
  unsigned int mxcsr;
  static FpState get() { return {__builtin_ia32_stmxcsr()}; }
  void set() const { __builtin_ia32_ldmxcsr(mxcsr); }
#elif defined(__aarch64__)
  unsigned long fpcr;
  static FpState get() {
    unsigned long v;
    __asm__ volatile("mrs %0, fpcr" : "=r"(v));
    return {v};
  }
  void set() const { __asm__ volatile("msr fpcr, %0" : : "r"(fpcr)); }
#else
  static FpState get() { return {}; }
  void set() const {}
#endif
};

// One call's work: `nitems` items (batch slice s, index range c of `nranges`), claimed one at a time by the calling
// thread and the helpers it scheduled. XLA may run a scheduled task late (after the call returned), on the calling
// thread, or never concurrently, so the calling thread claims items too and waits only for the items already
// claimed; the job lives on the heap until its last user (the caller or a late helper) lets go of it.
struct Work {
  const Descriptor* d;
  void** args;
  void** rets;
  int64_t nitems;
  int64_t nranges;
  int64_t range;  // tasks per index range (the last one takes the rest)
  FpState fp;
  int64_t next;   // the next unclaimed item
  int64_t done;   // items finished
  int64_t users;  // the caller, the helpers not yet finished with this object, and the open slot (see g_open)
  int64_t seats;  // helpers that may still join (the call's thread cap less one)
  // Privatised launches (Plan.private): range 0 of each slice accumulates into the results themselves, every other
  // range into its own copies (item_bytes each, in `scratch`); then `ncombine` combine items (nchunks per slice, by
  // element) add the copies into the results, once every range is done.
  char* scratch;
  int64_t item_bytes;
  int64_t ncombine;
  int64_t nchunks;
  int64_t combined;  // combine items finished
  int64_t work_ns;   // the time the ranges took, summed (a race-free launch's cost, its first few splits)
  bool timed;        // whether this call times its ranges
};

// ---- private copies of accumulated results (Plan.private) ----

template <typename T>
void fill_typed(void* dst, int64_t nbytes, T value) {
  T* p = static_cast<T*>(dst);
  int64_t n = nbytes / static_cast<int64_t>(sizeof(T));
  for (int64_t i = 0; i < n; ++i) p[i] = value;
}

template <typename T>
void combine_typed(void* dst, const void* src, int64_t nbytes, int64_t op) {
  T* out = static_cast<T*>(dst);
  const T* in = static_cast<const T*>(src);
  int64_t n = nbytes / static_cast<int64_t>(sizeof(T));
  if (op == 0) {
    for (int64_t i = 0; i < n; ++i) out[i] = out[i] + in[i];
  } else if (op == 1) {
    for (int64_t i = 0; i < n; ++i) out[i] = in[i] < out[i] ? in[i] : out[i];
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = in[i] > out[i] ? in[i] : out[i];
  }
}

// Fill a copy with the identity of its combination: zero for a sum, the type's largest value for a minimum, its
// smallest for a maximum (infinities for floats), so combining an untouched copy changes nothing.
void private_identity(const PrivateSpec& p, void* dst) {
  if (p.op == 0) {
    memset(dst, 0, static_cast<size_t>(p.nbytes));
    return;
  }
  bool lowest = p.op == 2;
  switch (p.scalar) {
    case 0: fill_typed<float>(dst, p.nbytes, lowest ? -__builtin_inff() : __builtin_inff()); break;
    case 1: fill_typed<double>(dst, p.nbytes, lowest ? -__builtin_inf() : __builtin_inf()); break;
    case 2: fill_typed<int32_t>(dst, p.nbytes, lowest ? int32_t(-2147483647 - 1) : int32_t(2147483647)); break;
    case 3:
      fill_typed<int64_t>(dst, p.nbytes, lowest ? int64_t(-9223372036854775807LL - 1) : int64_t(9223372036854775807LL));
      break;
    case 4: fill_typed<uint32_t>(dst, p.nbytes, lowest ? uint32_t(0) : uint32_t(0xffffffffu)); break;
    default: fill_typed<uint64_t>(dst, p.nbytes, lowest ? uint64_t(0) : ~uint64_t(0)); break;
  }
}

void private_combine(const PrivateSpec& p, void* dst, const void* src, int64_t nbytes) {
  switch (p.scalar) {
    case 0: combine_typed<float>(dst, src, nbytes, p.op); break;
    case 1: combine_typed<double>(dst, src, nbytes, p.op); break;
    case 2: combine_typed<int32_t>(dst, src, nbytes, p.op); break;
    case 3: combine_typed<int64_t>(dst, src, nbytes, p.op); break;
    case 4: combine_typed<uint32_t>(dst, src, nbytes, p.op); break;
    default: combine_typed<uint64_t>(dst, src, nbytes, p.op); break;
  }
}

int64_t scalar_bytes(const PrivateSpec& p) { return p.scalar == 0 || p.scalar == 2 || p.scalar == 4 ? 4 : 8; }

// The copies of range c (>= 1) of slice s.
char* private_copy(const Work* w, int64_t s, int64_t c) {
  return w->scratch + (s * (w->nranges - 1) + c - 1) * w->item_bytes;
}

// Combine item k: elements of chunk k % nchunks of slice k / nchunks, every copy added in range order (so any
// chunking gives the same bits).
void combine_item(const Work* w, int64_t k) {
  const Descriptor* d = w->d;
  int64_t s = k / w->nchunks;
  int64_t j = k % w->nchunks;
  int64_t offset = 0;  // of the spec in a copy
  for (int64_t i = 0; i < d->nprivate; ++i) {
    const PrivateSpec& p = d->private_specs[i];
    const PointerSlot& slot = d->slots[p.slot];
    int64_t size = scalar_bytes(p);
    int64_t n = p.nbytes / size;
    int64_t lo = n * j / w->nchunks;
    int64_t hi = n * (j + 1) / w->nchunks;
    if (hi > lo) {
      char* dst = static_cast<char*>(w->rets[slot.index]) + slot.offsets[s] + lo * size;
      for (int64_t c = 1; c < w->nranges; ++c)
        private_combine(p, dst, private_copy(w, s, c) + offset + lo * size, (hi - lo) * size);
    }
    offset += p.nbytes;
  }
}

__attribute__((noinline)) void run_item(const Work* w, int64_t item) {
  const Descriptor* d = w->d;
  int64_t s = item / w->nranges;
  int64_t c = item % w->nranges;
  uint64_t* blocks[2] = {nullptr, nullptr};
  for (int64_t b = 0; b < d->nblocks; ++b) {
    blocks[b] = static_cast<uint64_t*>(__builtin_alloca(static_cast<size_t>(d->block_bytes[b])));
    memcpy(blocks[b], d->templates[b], static_cast<size_t>(d->block_bytes[b]));
  }
  for (int64_t k = 0; k < d->nslots; ++k) {
    const PointerSlot& p = d->slots[k];
    void* const* side = p.source == 0 ? w->args : w->rets;
    blocks[p.block][p.word] = reinterpret_cast<uint64_t>(side[p.index]) + static_cast<uint64_t>(p.offsets[s]);
  }
  if (w->scratch != nullptr && c > 0) {  // this range accumulates into its own copies, filled here (in parallel)
    char* copy = private_copy(w, s, c);
    for (int64_t k = 0; k < d->nprivate; ++k) {
      const PrivateSpec& spec = d->private_specs[k];
      const PointerSlot& p = d->slots[spec.slot];
      private_identity(spec, copy);
      // every slot of the result: an adjoint launch also reaches it through the primal array's gradient pointer
      for (int64_t j = 0; j < d->nslots; ++j) {
        const PointerSlot& q = d->slots[j];
        if (q.source == p.source && q.index == p.index) blocks[q.block][q.word] = reinterpret_cast<uint64_t>(copy);
      }
      copy += spec.nbytes;
    }
  }
  if (w->nranges > 1) {
    size_t begin = static_cast<size_t>(c * w->range);
    size_t end = c + 1 == w->nranges ? static_cast<size_t>(d->tasks) : begin + static_cast<size_t>(w->range);
    int64_t started = w->timed ? now_ns() : 0;
    if (d->nblocks == 1)
      reinterpret_cast<CpuRange>(d->range_entry)(d->bounds, blocks[0], begin, end);
    else
      reinterpret_cast<CpuBackwardRange>(d->range_entry)(d->bounds, blocks[0], blocks[1], begin, end);
    if (started != 0) __atomic_add_fetch(&const_cast<Work*>(w)->work_ns, now_ns() - started, __ATOMIC_RELAXED);
  } else if (d->nblocks == 1) {
    reinterpret_cast<CpuForward>(d->entry)(d->bounds, blocks[0]);
  } else {
    reinterpret_cast<CpuBackward>(d->entry)(d->bounds, blocks[0], blocks[1]);
  }
}

void claim_items(Work* w) {
  for (;;) {
    int64_t item = __atomic_fetch_add(&w->next, 1, __ATOMIC_RELAXED);
    if (item >= w->nitems + w->ncombine) return;
    if (item < w->nitems) {
      run_item(w, item);
      __atomic_fetch_add(&w->done, 1, __ATOMIC_RELEASE);
      continue;
    }
    // A combine item: every range must be done (all are claimed before any combine item, so they finish).
    while (__atomic_load_n(&w->done, __ATOMIC_ACQUIRE) < w->nitems) sched_yield();
    combine_item(w, item - w->nitems);
    __atomic_fetch_add(&w->combined, 1, __ATOMIC_RELEASE);
  }
}

void let_go(Work* w) {
  if (__atomic_sub_fetch(&w->users, 1, __ATOMIC_ACQ_REL) == 0) free(w);
}

// Run items of `w` on this helper thread if the call still has a seat for a helper and unclaimed items.
void join(Work* w) {
  if (__atomic_sub_fetch(&w->seats, 1, __ATOMIC_ACQ_REL) < 0) return;  // the call has the threads it may use
  if (__atomic_load_n(&w->next, __ATOMIC_RELAXED) < w->nitems + w->ncombine) {
    FpState saved = FpState::get();
    w->fp.set();
    claim_items(w);
    saved.set();
  }
}

// ---- lingering helpers ----
//
// Waking a sleeping pool thread takes 0.1 to 0.25 ms on a virtual machine (the idle virtual CPU must be scheduled
// again), as long as a whole FEM launch over 1e4 elements. So a helper that runs out of items stays on its pool
// thread up to g_linger_ns, spinning (and yielding its core to anything else runnable), and joins the next split
// call if one opens meanwhile: calls in quick succession (the energy and gradient launches of one value_and_grad,
// the iterations of a solver or a training loop) start on every core at once. OpenMP runtimes do the same
// (OMP_WAIT_POLICY, KMP_BLOCKTIME). A call opens itself (g_open) for its whole claiming and counts the helpers
// lingering when it opens, scheduling that many fewer pool tasks; the lock makes a helper that stops lingering
// either see the call or be left out of that count.
int g_open_lock;
Work* g_open;           // the open call (one reference in `users`), or none
int64_t g_open_serial;  // calls opened so far: a lingering helper joins each at most once
int64_t g_lingering;    // helpers lingering now (not running a call's items)

void lock_open() {
  while (__atomic_exchange_n(&g_open_lock, 1, __ATOMIC_ACQUIRE) != 0) {
    while (__atomic_load_n(&g_open_lock, __ATOMIC_RELAXED) != 0) sched_yield();
  }
}

void unlock_open() { __atomic_store_n(&g_open_lock, 0, __ATOMIC_RELEASE); }

// Open `w` to lingering helpers; returns how many were lingering (they count as helpers already on their way).
int64_t open_call(Work* w) {
  __atomic_add_fetch(&w->users, 1, __ATOMIC_RELAXED);  // the open slot's reference
  lock_open();
  Work* previous = g_open;
  g_open = w;
  ++g_open_serial;
  int64_t lingering = g_lingering;
  unlock_open();
  if (previous != nullptr) let_go(previous);  // a concurrent call's slot, taken over
  return lingering;
}

void close_call(Work* w) {
  lock_open();
  bool mine = g_open == w;
  if (mine) g_open = nullptr;
  unlock_open();
  if (mine) let_go(w);
}

// Wait up to g_linger_ns (read at every check, so a new setting takes effect at once) for calls to join; return
// once none opened for that long.
void linger() {
  if (__atomic_load_n(&g_linger_ns, __ATOMIC_RELAXED) <= 0) return;
  lock_open();
  int64_t seen = g_open_serial;  // the call open now (if any) is the one this helper just ran, or full
  ++g_lingering;
  unlock_open();
  int64_t since = now_ns();
  for (;;) {
    bool expired = now_ns() - since >= __atomic_load_n(&g_linger_ns, __ATOMIC_RELAXED);
    Work* w = nullptr;
    if (expired || __atomic_load_n(&g_open_serial, __ATOMIC_RELAXED) != seen) {
      lock_open();
      if (g_open != nullptr && g_open_serial != seen) {
        w = g_open;
        __atomic_add_fetch(&w->users, 1, __ATOMIC_RELAXED);
        --g_lingering;
      } else if (expired) {
        --g_lingering;
        unlock_open();
        return;
      }
      seen = g_open_serial;  // joined, or opened and closed meanwhile
      unlock_open();
    }
    if (w == nullptr) {
      sched_yield();
      continue;
    }
    __atomic_add_fetch(&g_pool_joins, 1, __ATOMIC_RELAXED);
    join(w);
    let_go(w);
    lock_open();
    ++g_lingering;
    unlock_open();
    since = now_ns();
  }
}

void helper_task(void* data) {  // an XLA_FFI_Task: runs on one of XLA's threads, without the GIL
  Work* w = static_cast<Work*>(data);
  join(w);
  let_go(w);
  linger();
}

// How many threads a CPU call may use: 1 unless it may run concurrently and is large enough to be worth it.
// Keep the fastest whole-launch cost seen (a launch run whole, or the ranges of a split one summed).
void record_cost(Measure* m, int64_t took) {
  int64_t seen = __atomic_load_n(&m->cost_ns, __ATOMIC_RELAXED);
  while ((seen == 0 || took < seen) &&
         !__atomic_compare_exchange_n(&m->cost_ns, &seen, took, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
  __atomic_add_fetch(&m->samples, 1, __ATOMIC_RELAXED);
}

int64_t measured_cost(const Descriptor* d) {
  return d->measure == nullptr ? 0 : __atomic_load_n(&d->measure->cost_ns, __ATOMIC_RELAXED);
}

int64_t pool_threads(XLA_FFI_CallFrame* frame, const Descriptor* d) {
  if (!d->concurrent) return 1;
  if (d->tasks * d->nslices < __atomic_load_n(&g_min_tasks, __ATOMIC_RELAXED)) {
    // Few tasks: worth splitting only if the launch can be split and is long: measured so (a race-free launch,
    // bit-identical however it runs), or estimated so from its code (a privatised one, whose split must not depend
    // on timing: its sums depend on the split). Its ranged entry exists only if that estimate is large.
    if (d->range_entry == nullptr) return 1;
    if (d->nprivate == 0 && measured_cost(d) < __atomic_load_n(&g_min_cost_ns, __ATOMIC_RELAXED)) return 1;
  }
  int64_t cap = __atomic_load_n(&g_max_threads, __ATOMIC_RELAXED);
  if (cap == 1) return 1;
  XLA_FFI_ThreadPool_NumThreads_Args args;
  args.struct_size = XLA_FFI_ThreadPool_NumThreads_Args_STRUCT_SIZE;
  args.extension_start = nullptr;
  args.ctx = frame->ctx;
  int64_t n = 0;
  args.num_threads = &n;
  XLA_FFI_Error* err = frame->api->XLA_FFI_ThreadPool_NumThreads(&args);
  if (err != nullptr) {  // no pool for this call: one thread
    XLA_FFI_Error_Destroy_Args destroy;
    destroy.struct_size = XLA_FFI_Error_Destroy_Args_STRUCT_SIZE;
    destroy.extension_start = nullptr;
    destroy.error = err;
    frame->api->XLA_FFI_Error_Destroy(&destroy);
    return 1;
  }
  if (cap > 0 && n > cap) n = cap;
  return n < 1 ? 1 : n;
}

// Run a CPU launch's slices (and, for a race-free kernel, index ranges of each) on `threads` threads: the calling
// one and up to threads - 1 helpers on XLA's pool. Returns false (nothing run) if it could not allocate.
bool run_on_pool(XLA_FFI_CallFrame* frame, const Descriptor* d, void** args, void** rets, int64_t threads) {
  int64_t nranges = 1;
  int64_t range = d->tasks;
  int64_t item_bytes = 0;  // the private copies of one work item
  for (int64_t k = 0; k < d->nprivate; ++k) item_bytes += d->private_specs[k].nbytes;
  // Whole cache lines per item: ranges on different cores accumulating into neighbouring copies would otherwise
  // share lines (a one-element energy accumulated by every thread: every add a cache miss).
  item_bytes = (item_bytes + 63) / 64 * 64;
  if (d->range_entry != nullptr) {
    int64_t min_range = __atomic_load_n(&g_min_range, __ATOMIC_RELAXED);
    if (d->nprivate > 0) {
      // Privatised: every choice from static quantities (the split decides the rounding of the sums, so the same
      // call must split the same way every time). Ranges of at least kRangeWork estimated statements.
      constexpr int64_t kRangeWork = 1 << 16;
      int64_t per_task = d->work / (d->tasks > 0 ? d->tasks : 1);
      int64_t by_work = per_task > 0 ? (kRangeWork + per_task - 1) / per_task : min_range;
      if (by_work < min_range) min_range = by_work;
    } else {
      int64_t cost = measured_cost(d);
      if (cost > 0) {
        // A measured race-free launch: ranges of about g_item_ns each (at least one task), however few its tasks.
        int64_t tasks = d->tasks * d->nslices;
        int64_t by_cost = static_cast<int64_t>(static_cast<double>(tasks) *
                                               static_cast<double>(__atomic_load_n(&g_item_ns, __ATOMIC_RELAXED)) /
                                               static_cast<double>(cost));
        if (by_cost < 1) by_cost = 1;
        if (by_cost < min_range) min_range = by_cost;
      }
    }
    // (The executor builds the ranged entry only for a launch that may pass this: `KernelExecutor._threading`.)
    if (d->tasks >= 2 * min_range) {
      // Several items per thread: a helper the machine deschedules mid-item holds the caller for one item only.
      // A long race-free launch gets items of about kBalanceNs (more than 8 per thread), so that cores of unequal
      // speed (a shared machine) finish within that of each other; claiming an item costs well under a microsecond.
      constexpr int64_t kBalanceNs = 1000000;
      int64_t items = 8 * threads;
      if (d->nprivate == 0 && measured_cost(d) / kBalanceNs > items) items = measured_cost(d) / kBalanceNs;
      int64_t want = (items + d->nslices - 1) / d->nslices;
      int64_t most = d->tasks / min_range;
      nranges = want < most ? want : most;
      if (item_bytes > 0) {
        // Every range but the first fills, accumulates into and combines a copy: keep those bytes within a
        // twentieth of a byte per estimated statement (a FEM gradient over 1e5 tetrahedra: one copy per thread),
        // never below one range per thread, never above the cap.
        int64_t budget = d->work * d->nslices / 20;
        int64_t soft = 1 + budget / (item_bytes * d->nslices);
        int64_t floor = (threads + d->nslices - 1) / d->nslices;
        int64_t keep = soft > floor ? soft : floor;
        if (keep < nranges) nranges = keep;
        int64_t fit = 1 + __atomic_load_n(&g_private_cap, __ATOMIC_RELAXED) / (item_bytes * d->nslices);
        if (nranges > fit) nranges = fit;
      }
      if (nranges < 2) nranges = 1;
      range = d->tasks / nranges;
    }
  }
  if (nranges == 1) item_bytes = 0;  // whole launches per slice accumulate into their own slice: no copies
  if (item_bytes == 0 && d->nprivate > 0 && d->nslices == 1) return false;  // cannot split without copies
  int64_t nitems = d->nslices * nranges;
  if (nitems < 2) return false;
  char* scratch = nullptr;
  char* raw = nullptr;
  if (item_bytes > 0) {  // copies for ranges 1.. of each slice (filled by the item that uses them)
    raw = static_cast<char*>(malloc(static_cast<size_t>(item_bytes * d->nslices * (nranges - 1) + 64)));
    if (raw == nullptr) return false;
    scratch = raw + (64 - reinterpret_cast<uint64_t>(raw) % 64) % 64;  // cache-line aligned
  }
  size_t nptrs = static_cast<size_t>(d->nargs + d->nrets);
  Work* w = static_cast<Work*>(malloc(sizeof(Work) + sizeof(void*) * (nptrs + 1)));
  if (w == nullptr) {
    free(raw);
    return false;
  }
  void** copy = reinterpret_cast<void**>(w + 1);
  memcpy(copy, args, sizeof(void*) * static_cast<size_t>(d->nargs));
  memcpy(copy + d->nargs, rets, sizeof(void*) * static_cast<size_t>(d->nrets));
  w->scratch = scratch;
  w->item_bytes = item_bytes;
  w->nchunks = scratch != nullptr ? 2 * threads : 1;
  w->ncombine = scratch != nullptr ? d->nslices * w->nchunks : 0;
  w->combined = 0;
  w->work_ns = 0;
  w->timed = d->measure != nullptr && d->nprivate == 0 && nranges > 1 &&
             __atomic_load_n(&d->measure->samples, __ATOMIC_RELAXED) < 8;
  w->d = d;
  w->args = copy;
  w->rets = copy + d->nargs;
  w->nitems = nitems;
  w->nranges = nranges;
  w->range = range;
  w->fp = FpState::get();
  w->next = 0;
  w->done = 0;
  int64_t seats = (threads < nitems ? threads : nitems) - 1;
  w->seats = seats;
  w->users = 1;
  __atomic_fetch_add(&g_pool_calls, 1, __ATOMIC_RELAXED);
  __atomic_fetch_add(&g_pool_items, nitems, __ATOMIC_RELAXED);
  int64_t lingering = open_call(w);
  int64_t helpers = seats > lingering ? seats - lingering : 0;
  __atomic_add_fetch(&w->users, helpers, __ATOMIC_RELAXED);
  for (int64_t h = 0; h < helpers; ++h) {
    XLA_FFI_ThreadPool_Schedule_Args sched;
    sched.struct_size = XLA_FFI_ThreadPool_Schedule_Args_STRUCT_SIZE;
    sched.extension_start = nullptr;
    sched.ctx = frame->ctx;
    sched.task = helper_task;
    sched.data = w;
    XLA_FFI_Error* err = frame->api->XLA_FFI_ThreadPool_Schedule(&sched);
    if (err != nullptr) {  // no more helpers: the ones not scheduled let go, the caller does the rest
      XLA_FFI_Error_Destroy_Args destroy;
      destroy.struct_size = XLA_FFI_Error_Destroy_Args_STRUCT_SIZE;
      destroy.extension_start = nullptr;
      destroy.error = err;
      frame->api->XLA_FFI_Error_Destroy(&destroy);
      __atomic_sub_fetch(&w->users, helpers - h, __ATOMIC_ACQ_REL);
      break;
    }
  }
  claim_items(w);
  close_call(w);
  // Every item is claimed; wait for the ones helpers are still running (their results are this call's). The copies
  // were combined into the results in range order, element by element: deterministic for a given split (minimum,
  // maximum and integer sums exact; float sums within rounding of one thread's order).
  while (__atomic_load_n(&w->done, __ATOMIC_ACQUIRE) < nitems ||
         __atomic_load_n(&w->combined, __ATOMIC_ACQUIRE) < w->ncombine)
    sched_yield();
  free(raw);  // no helper touches it once every item is done
  if (w->timed) record_cost(d->measure, __atomic_load_n(&w->work_ns, __ATOMIC_RELAXED));
  let_go(w);
  return true;
}

// ---- Warp structures built inside the call (CPU) ----
//
// A call given a jarp.warp.Mesh or Bvh builds the Warp structure from its buffers on its first run and refits it
// on every later one, as jarp's Python path does (jarp/warp/_geometry/_builds.py), through Warp's own host
// functions. Each structure is kept in its StructState between calls; one call at a time uses it (a second call
// of the same executable on another thread takes the Python path, which keeps structures of its own). Anything
// unusual goes to the Python path, which explains it: an index out of range, or Warp's functions missing.

WarpArray vec3_array(void* data, int64_t n) {
  WarpArray a;
  memset(&a, 0, sizeof(a));
  a.data = data;
  a.shape[0] = static_cast<int32_t>(n);
  a.strides[0] = 12;  // wp::vec3
  a.ndim = 1;
  return a;
}

template <typename T>
bool indices_in_range(const T* src, int64_t n, int64_t count) {  // unsigned ones compare as unsigned
  for (int64_t i = 0; i < n; ++i) {
    T v = src[i];
    if (v < T(0) || static_cast<uint64_t>(v) >= static_cast<uint64_t>(count)) return false;
  }
  return true;
}

template <typename T>
bool same_indices(const T* src, int64_t n, const int32_t* kept) {
  for (int64_t i = 0; i < n; ++i)
    if (kept[i] != static_cast<int32_t>(src[i])) return false;
  return true;
}

template <typename T>
void narrow_indices(const T* src, int64_t n, int32_t* dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<int32_t>(src[i]);
}

// The three buffers of structure ``s`` in batch slice ``slice`` (null where there is none).
void slice_buffers(const StructSpec& s, void* const* args, int64_t slice, char** out) {
  for (int k = 0; k < 3; ++k)
    out[k] = s.arg[k] < 0 ? nullptr : static_cast<char*>(args[s.arg[k]]) + s.offsets[slice * 3 + k];
}

template <typename T>
uint64_t prepare_mesh_of(const StructSpec& s, StructState* st, char* const* buffers, const T* src) {
  WarpArray points = vec3_array(buffers[0], s.count);
  void* velocities = buffers[2] != nullptr ? buffers[2] : st->own[kKept];
  int64_t now = ++st->clock;
  // the mesh of these triangles, if one is kept: point it at this call's buffers and refit it (Warp's setter)
  int64_t order[kKept];
  for (int64_t e = 0; e < kKept; ++e) order[e] = e;
  for (int64_t a = 1; a < kKept; ++a)  // most recently used first
    for (int64_t b = a; b > 0 && st->used[order[b]] > st->used[order[b - 1]]; --b) {
      int64_t t = order[b];
      order[b] = order[b - 1];
      order[b - 1] = t;
    }
  for (int64_t k = 0; k < kKept; ++k) {
    int64_t e = order[k];
    if (st->id[e] == 0 || !same_indices(src, s.nindices, static_cast<const int32_t*>(st->own[e]))) continue;
    __atomic_add_fetch(&g_structure_refits, 1, __ATOMIC_RELAXED);
    g_mesh_set_points(st->id[e], points);
    if (buffers[2] != nullptr) g_mesh_set_velocities(st->id[e], vec3_array(velocities, s.count));
    st->used[e] = now;
    return st->id[e];
  }
  // new triangles: a new tree over the narrowed indices, in place of the least recently used one
  int64_t e = order[kKept - 1];
  if (st->id[e] != 0) g_mesh_destroy(st->id[e]);
  st->id[e] = 0;
  int32_t* kept = static_cast<int32_t*>(st->own[e]);
  narrow_indices(src, s.nindices, kept);
  WarpArray indices;
  memset(&indices, 0, sizeof(indices));
  indices.data = kept;
  indices.shape[0] = static_cast<int32_t>(s.nindices);
  indices.strides[0] = 4;
  indices.ndim = 1;
  __atomic_add_fetch(&g_structure_builds, 1, __ATOMIC_RELAXED);
  st->id[e] = g_mesh_create(points, vec3_array(velocities, s.count), indices, static_cast<int>(s.count),
                            static_cast<int>(s.nindices / 3), static_cast<int>(s.winding),
                            static_cast<int>(s.constructor), nullptr, static_cast<int>(s.leaf_size));
  st->used[e] = now;
  return st->id[e];
}

// Call ``f`` with a mesh's index buffer as its scalar type (its ``index_type``); ``fallback`` for an unknown one.
template <typename F, typename R>
R with_indices(const StructSpec& s, const char* indices, R fallback, F f) {
  switch (s.index_type) {
    case 0: return f(reinterpret_cast<const int32_t*>(indices));
    case 1: return f(reinterpret_cast<const int64_t*>(indices));
    case 2: return f(reinterpret_cast<const uint32_t*>(indices));
    case 3: return f(reinterpret_cast<const uint64_t*>(indices));
    default: return fallback;
  }
}

// Whether a mesh's indices in one batch slice all name one of its points (checked for every slice before any
// is launched: a call the Python path must explain has written nothing).
bool mesh_indices_valid(const StructSpec& s, char* const* buffers) {
  return with_indices(s, buffers[1], false, [&](auto src) { return indices_in_range(src, s.nindices, s.count); });
}

uint64_t prepare_mesh(const StructSpec& s, StructState* st, char* const* buffers) {
  return with_indices(s, buffers[1], uint64_t(0), [&](auto src) { return prepare_mesh_of(s, st, buffers, src); });
}

uint64_t prepare_bvh(const StructSpec& s, StructState* st, char* const* buffers) {
  // Warp's BVH reads its bounds through the pointers it was built with: they are the state's own copies
  size_t nbytes = static_cast<size_t>(s.count) * 12;
  memcpy(st->own[0], buffers[0], nbytes);
  memcpy(st->own[1], buffers[1], nbytes);
  if (st->id[0] != 0) {
    __atomic_add_fetch(&g_structure_refits, 1, __ATOMIC_RELAXED);
    g_bvh_refit(st->id[0]);
    return st->id[0];
  }
  __atomic_add_fetch(&g_structure_builds, 1, __ATOMIC_RELAXED);
  st->id[0] = g_bvh_create(st->own[0], st->own[1], static_cast<int>(s.count), static_cast<int>(s.constructor),
                           nullptr, static_cast<int>(s.leaf_size));
  return st->id[0];
}

void release_structures(const Descriptor* d, int64_t n) {
  for (int64_t k = 0; k < n; ++k) __atomic_store_n(&d->structs[k].state[0].busy, 0, __ATOMIC_RELEASE);
}

// Take the descriptor's structures for this call and check every slice's indices; false (nothing held) where the
// call must take the Python path (another call holds them, an index is out of range, Warp's functions are missing).
bool take_structures(const Descriptor* d, void* const* args) {
  if (__atomic_load_n(&g_mesh_create, __ATOMIC_ACQUIRE) == nullptr) return false;
  for (int64_t k = 0; k < d->nstructs; ++k) {
    if (__atomic_exchange_n(&d->structs[k].state[0].busy, 1, __ATOMIC_ACQUIRE) != 0) {
      release_structures(d, k);
      return false;
    }
  }
  char* buffers[3];
  for (int64_t s = 0; s < d->nslices; ++s)
    for (int64_t k = 0; k < d->nstructs; ++k) {
      const StructSpec& spec = d->structs[k];
      slice_buffers(spec, args, s, buffers);
      if (spec.kind == 0 && !mesh_indices_valid(spec, buffers)) {  // the Python path names the first one
        release_structures(d, d->nstructs);
        return false;
      }
    }
  return true;
}

// Build or refit each structure of batch slice ``slice`` from its buffers and write its id into the argument block.
bool prepare_structures(const Descriptor* d, void* const* args, uint64_t* block, int64_t slice) {
  char* buffers[3];
  for (int64_t k = 0; k < d->nstructs; ++k) {
    const StructSpec& s = d->structs[k];
    slice_buffers(s, args, slice, buffers);
    StructState* st = &s.state[slice];
    uint64_t id = s.kind == 0 ? prepare_mesh(s, st, buffers) : prepare_bvh(s, st, buffers);
    if (id == 0) return false;
    block[s.word] = id;
  }
  return true;
}

// The instantiate stage (once per loaded executable): resolve the call's description to a plan handle and a
// lease (jarp's Python side checks the attributes in full) and keep both as the call's state.
template <int kCuda, int kGraph>
XLA_FFI_Error* instantiate(XLA_FFI_CallFrame* frame) {
  if (frame->extension_start != nullptr && answer_metadata(frame, kGraph)) return nullptr;
  int64_t out[2] = {-1, -1};
  Resolve resolve = g_resolve[kCuda * 2 + kGraph];
  XLA_FFI_Error* err = python(frame, [&] { return resolve(frame, out); });
  if (err != nullptr) return err;
  State* state = static_cast<State*>(malloc(sizeof(State)));
  if (state == nullptr) return error(frame, XLA_FFI_Error_Code_RESOURCE_EXHAUSTED, "jarp: out of memory");
  state->handle = out[0];
  state->lease = out[1];
  state->next = nullptr;
  XLA_FFI_State_Set_Args args;
  args.struct_size = XLA_FFI_State_Set_Args_STRUCT_SIZE;
  args.extension_start = nullptr;
  args.ctx = frame->ctx;
  args.stage = XLA_FFI_ExecutionStage_INSTANTIATE;
  args.type_id = &jarp_state_type;
  args.state = state;
  err = frame->api->XLA_FFI_State_Set(&args);
  if (err != nullptr) delete_state(state);  // the lease goes back to Python
  return err;
}

template <int kCuda, int kGraph>
XLA_FFI_Error* handler(XLA_FFI_CallFrame* frame) {
  SlowPath slow = g_slow[kCuda * 2 + kGraph];
  if (frame->extension_start != nullptr && answer_metadata(frame, kGraph)) return nullptr;
  if (frame->struct_size < XLA_FFI_CallFrame_STRUCT_SIZE) return python(slow, frame);

  // The plan handle the instantiate stage resolved this call's description to.
  XLA_FFI_State_Get_Args get;
  get.struct_size = XLA_FFI_State_Get_Args_STRUCT_SIZE;
  get.extension_start = nullptr;
  get.ctx = frame->ctx;
  get.stage = XLA_FFI_ExecutionStage_INSTANTIATE;
  get.type_id = &jarp_state_type;
  get.state = nullptr;
  XLA_FFI_Error* missing = frame->api->XLA_FFI_State_Get(&get);
  if (missing != nullptr) {  // not instantiated by jarp: the Python side explains
    XLA_FFI_Error_Destroy_Args destroy;
    destroy.struct_size = XLA_FFI_Error_Destroy_Args_STRUCT_SIZE;
    destroy.extension_start = nullptr;
    destroy.error = missing;
    frame->api->XLA_FFI_Error_Destroy(&destroy);
    return python(slow, frame);
  }
  if (get.state == nullptr) return python(slow, frame);
  int64_t handle = static_cast<const State*>(get.state)->handle;

  int64_t slot = 0;
  if (kCuda) {
    XLA_FFI_DeviceOrdinal_Get_Args args;
    args.struct_size = XLA_FFI_DeviceOrdinal_Get_Args_STRUCT_SIZE;
    args.extension_start = nullptr;
    args.ctx = frame->ctx;
    args.device_ordinal = -1;
    XLA_FFI_Error* err = frame->api->XLA_FFI_DeviceOrdinal_Get(&args);
    if (err != nullptr) return err;
    if (args.device_ordinal < 0 || args.device_ordinal >= kDeviceSlots - 1) return python(slow, frame, handle);
    slot = 1 + args.device_ordinal;
  }
  const Descriptor* d = lookup(handle, slot);
  if (d == nullptr) return python(slow, frame, handle);  // not prepared yet, a callable, or not jarp's

  // The buffers, exactly as the plan expects them, before any memory is touched.
  if (frame->args.size != d->nargs || frame->rets.size != d->nrets) return python(slow, frame, handle);
  void** ptrs[2];
  ptrs[0] = static_cast<void**>(__builtin_alloca(sizeof(void*) * (d->nargs + d->nrets + 1)));
  ptrs[1] = ptrs[0] + d->nargs;
  for (int64_t i = 0; i < d->nargs; ++i) {
    const XLA_FFI_Buffer* b = static_cast<const XLA_FFI_Buffer*>(frame->args.args[i]);
    if (frame->args.types[i] != XLA_FFI_ArgType_BUFFER || !same_buffer(b, d->args[i])) return python(slow, frame, handle);
    ptrs[0][i] = b->data;
  }
  for (int64_t j = 0; j < d->nrets; ++j) {
    const XLA_FFI_Buffer* b = static_cast<const XLA_FFI_Buffer*>(frame->rets.rets[j]);
    if (frame->rets.types[j] != XLA_FFI_RetType_BUFFER || !same_buffer(b, d->rets[j])) return python(slow, frame, handle);
    ptrs[1][j] = b->data;
  }

  void* stream = nullptr;
  if (kCuda) {
    XLA_FFI_Stream_Get_Args args;
    args.struct_size = XLA_FFI_Stream_Get_Args_STRUCT_SIZE;
    args.extension_start = nullptr;
    args.ctx = frame->ctx;
    args.stream = nullptr;
    XLA_FFI_Error* err = frame->api->XLA_FFI_Stream_Get(&args);
    if (err != nullptr) return err;
    stream = args.stream;
  }
  for (int64_t c = 0; c < d->ncopies; ++c) {
    void* src = ptrs[0][d->copies[c].arg];
    void* dst = ptrs[1][d->copies[c].ret];
    size_t nbytes = static_cast<size_t>(d->copies[c].nbytes);
    if (src == dst) continue;  // XLA gave the result the operand's buffer after all
    if (!kCuda) {
      memcpy(dst, src, nbytes);
    } else if (!g_cuda_memcpy(d->context, dst, src, nbytes, stream)) {
      return cuda_failure(frame, d, ": copying an in-out operand to its result before the launch failed");
    }
  }
  for (int64_t z = 0; z < d->nzero; ++z) {
    void* dst = ptrs[1][d->zero[z].index];
    size_t nbytes = static_cast<size_t>(d->zero[z].nbytes);
    if (!kCuda) {
      memset(dst, 0, nbytes);
    } else if (!g_cuda_memset(d->context, dst, 0, nbytes, stream)) {
      return cuda_failure(frame, d, ": zero-filling a result before the launch failed");
    }
  }
  if (!d->launch) return nullptr;
  if (!kCuda && d->nstructs == 0) {
    int64_t threads = pool_threads(frame, d);
    if (threads > 1 && run_on_pool(frame, d, ptrs[0], ptrs[1], threads)) return nullptr;
  }

  // A launch that may split by its cost is timed whole, its first few times (the fastest counts).
  int64_t started = 0;
  Measure* measure = kCuda ? nullptr : d->measure;
  if (measure != nullptr && __atomic_load_n(&measure->samples, __ATOMIC_RELAXED) < 3) started = now_ns();

  // Each call fills its own copy of the argument blocks, so threads launch concurrently.
  uint64_t* blocks[2] = {nullptr, nullptr};
  for (int64_t b = 0; b < d->nblocks; ++b) {
    blocks[b] = static_cast<uint64_t*>(__builtin_alloca(static_cast<size_t>(d->block_bytes[b])));
    memcpy(blocks[b], d->templates[b], static_cast<size_t>(d->block_bytes[b]));
  }
  void** params = nullptr;
  if (kCuda) {
    // cuLaunchKernel takes one pointer per parameter (the bounds, then every field of the argument
    // block(s)) and copies the values at launch, so the blocks can be patched again for the next slice.
    params = static_cast<void**>(__builtin_alloca(sizeof(void*) * (d->nparams + 1)));
    for (int64_t k = 0; k < d->nparams; ++k) {
      const KernelParam& p = d->params[k];
      params[k] = p.block == 2 ? const_cast<void*>(d->bounds)
                               : static_cast<void*>(reinterpret_cast<char*>(blocks[p.block]) + p.offset);
    }
  }
  if (d->nstructs > 0 && (kCuda || d->nblocks != 1 || !take_structures(d, ptrs[0]))) return python(slow, frame, handle);
  for (int64_t s = 0; s < d->nslices; ++s) {
    for (int64_t k = 0; k < d->nslots; ++k) {
      const PointerSlot& p = d->slots[k];
      uint64_t base = reinterpret_cast<uint64_t>(ptrs[p.source][p.index]);
      blocks[p.block][p.word] = base + static_cast<uint64_t>(p.offsets[s]);
    }
    if (d->nstructs > 0 && !prepare_structures(d, ptrs[0], blocks[0], s)) {
      // Warp could not build a structure (its allocation failed): before any launch the Python path tries again and
      // raises Warp's error; after one, the results are partly written and the call fails here
      release_structures(d, d->nstructs);
      if (s == 0) return python(slow, frame, handle);
      return error(frame, XLA_FFI_Error_Code_RESOURCE_EXHAUSTED,
                   "jarp: Warp could not build a mesh or BVH for a batch slice of a call (out of memory?)");
    }
    if (kCuda) {
      if (g_cuda_launch(d->context, d->entry, static_cast<size_t>(d->dim), 0, static_cast<int>(d->block_dim),
                        static_cast<int>(d->grid_stride), static_cast<int>(d->cluster_dim),
                        static_cast<int>(d->smem_bytes), params, stream, nullptr) != 0)
        return cuda_failure(frame, d, "");
    } else if (d->nblocks == 1) {
      reinterpret_cast<CpuForward>(d->entry)(d->bounds, blocks[0]);
    } else {
      reinterpret_cast<CpuBackward>(d->entry)(d->bounds, blocks[0], blocks[1]);
    }
  }
  if (started != 0) record_cost(measure, now_ns() - started);
  release_structures(d, d->nstructs);
  return nullptr;
}

}  // namespace

extern "C" {

// The handlers, one per (platform, graph trait) and stage; jarp registers them as its FFI targets.
XLA_FFI_Error* jarp_handler_cpu(XLA_FFI_CallFrame* frame) { return handler<0, 1>(frame); }
XLA_FFI_Error* jarp_handler_cpu_no_graph(XLA_FFI_CallFrame* frame) { return handler<0, 0>(frame); }
XLA_FFI_Error* jarp_handler_cuda(XLA_FFI_CallFrame* frame) { return handler<1, 1>(frame); }
XLA_FFI_Error* jarp_handler_cuda_no_graph(XLA_FFI_CallFrame* frame) { return handler<1, 0>(frame); }
XLA_FFI_Error* jarp_instantiate_cpu(XLA_FFI_CallFrame* frame) { return instantiate<0, 1>(frame); }
XLA_FFI_Error* jarp_instantiate_cpu_no_graph(XLA_FFI_CallFrame* frame) { return instantiate<0, 0>(frame); }
XLA_FFI_Error* jarp_instantiate_cuda(XLA_FFI_CallFrame* frame) { return instantiate<1, 1>(frame); }
XLA_FFI_Error* jarp_instantiate_cuda_no_graph(XLA_FFI_CallFrame* frame) { return instantiate<1, 0>(frame); }

XLA_FFI_TypeId jarp_state_type = {0};
extern const XLA_FFI_TypeInfo jarp_state_info = {XLA_FFI_TypeInfo_STRUCT_SIZE, nullptr, delete_state};

// Drain the states XLA deleted: write up to ``max`` lease ids to ``out`` and free the states; the count written.
// One consumer at a time (Python calls it under a lock); producers only push, so there is no ABA.
int64_t jarp_take_released(int64_t* out, int64_t max) {
  static State* taken = nullptr;
  if (taken == nullptr) taken = __atomic_exchange_n(&g_released, nullptr, __ATOMIC_ACQ_REL);
  int64_t n = 0;
  while (taken != nullptr && n < max) {
    State* state = taken;
    taken = state->next;
    out[n++] = state->lease;
    free(state);
  }
  return n;
}

// The floor of what a handler costs: answers XLA's metadata query, otherwise does nothing
// (benchmarks/bench_launch.py times it beside jarp's handler).
XLA_FFI_Error* jarp_floor_handler(XLA_FFI_CallFrame* frame) {
  if (frame->extension_start != nullptr) answer_metadata(frame, true, false);
  return nullptr;
}

// Set once, before the handlers are registered: the Python callbacks ([platform * 2 + graph], for the execute
// and the instantiate stage), and Warp's CUDA launch, memset, error-string and device-to-device copy functions.
void jarp_configure(void* const* slow, void* const* resolve, void* cuda_launch, void* cuda_memset,
                    void* error_string, void* cuda_memcpy) {
  for (int i = 0; i < 4; ++i) {
    g_slow[i] = reinterpret_cast<SlowPath>(slow[i]);
    g_resolve[i] = reinterpret_cast<Resolve>(resolve[i]);
  }
  g_cuda_launch = reinterpret_cast<CudaLaunch>(cuda_launch);
  g_cuda_memset = reinterpret_cast<CudaMemset>(cuda_memset);
  g_error_string = reinterpret_cast<ErrorString>(error_string);
  g_cuda_memcpy = reinterpret_cast<CudaMemcpy>(cuda_memcpy);
}

// Set once, when the handler loads: Warp's host functions for the structures a call builds (Python reads their
// addresses from Warp's library), in the order of the declarations above.
void jarp_configure_structures(void* const* functions) {
  g_mesh_set_points = reinterpret_cast<MeshSet>(functions[1]);
  g_mesh_set_velocities = reinterpret_cast<MeshSet>(functions[2]);
  g_mesh_destroy = reinterpret_cast<IdFunction>(functions[3]);
  g_bvh_create = reinterpret_cast<BvhCreate>(functions[4]);
  g_bvh_refit = reinterpret_cast<IdFunction>(functions[5]);
  g_bvh_destroy = reinterpret_cast<IdFunction>(functions[6]);
  __atomic_store_n(&g_mesh_create, reinterpret_cast<MeshCreate>(functions[0]), __ATOMIC_RELEASE);
}

// The structures built and refitted since the handler was loaded.
void jarp_structure_stats(int64_t* out) {
  out[0] = __atomic_load_n(&g_structure_builds, __ATOMIC_RELAXED);
  out[1] = __atomic_load_n(&g_structure_refits, __ATOMIC_RELAXED);
}

// Destroy a structure a descriptor's state kept (Python calls it once no call can use the descriptor any more).
void jarp_destroy_structure(int64_t kind, uint64_t id) {
  if (id == 0) return;
  if (kind == 0) g_mesh_destroy(id);
  else g_bvh_destroy(id);
}

// Cap jarp's CPU threads per call (0: XLA's pool size; 1: the calling thread only) and set the thresholds below
// which a call stays on the calling thread (tasks in all) and a launch is not split (tasks per index range).
void jarp_set_threads(int64_t max_threads, int64_t min_tasks, int64_t min_range, int64_t min_cost_ns,
                      int64_t item_ns, int64_t private_cap, int64_t linger_ns) {
  __atomic_store_n(&g_max_threads, max_threads, __ATOMIC_RELAXED);
  __atomic_store_n(&g_min_tasks, min_tasks, __ATOMIC_RELAXED);
  __atomic_store_n(&g_min_range, min_range < 1 ? 1 : min_range, __ATOMIC_RELAXED);
  __atomic_store_n(&g_min_cost_ns, min_cost_ns, __ATOMIC_RELAXED);
  __atomic_store_n(&g_item_ns, item_ns < 1 ? 1 : item_ns, __ATOMIC_RELAXED);
  __atomic_store_n(&g_private_cap, private_cap, __ATOMIC_RELAXED);
  __atomic_store_n(&g_linger_ns, linger_ns, __ATOMIC_RELAXED);
}

// The counters of calls run on the pool and of the work items they ran (both since the handler was loaded).
void jarp_pool_stats(int64_t* out) {
  out[0] = __atomic_load_n(&g_pool_calls, __ATOMIC_RELAXED);
  out[1] = __atomic_load_n(&g_pool_items, __ATOMIC_RELAXED);
  out[2] = __atomic_load_n(&g_pool_joins, __ATOMIC_RELAXED);
}

// Interpreter exit: refuse the Python callback from now on; the number of calls still inside it.
void jarp_begin_exit(void) { __atomic_store_n(&g_exiting, 1, __ATOMIC_SEQ_CST); }
int64_t jarp_python_calls(void) { return __atomic_load_n(&g_in_python, __ATOMIC_SEQ_CST); }

// Give the table the memory of chunk ``index`` (kChunkHandles * kDeviceSlots zeroed pointers, owned by Python).
int jarp_add_chunk(int64_t index, Descriptor** chunk) {
  if (index < 0 || index >= kMaxChunks) return 0;
  __atomic_store_n(&g_chunks[index], chunk, __ATOMIC_RELEASE);
  return 1;
}

// Publish (or, with nullptr, withdraw) the descriptor of (handle, device slot); its chunk must exist.
int jarp_publish(int64_t handle, int64_t slot, Descriptor* descriptor) {
  if (handle < 0 || handle >= kChunkHandles * kMaxChunks || slot < 0 || slot >= kDeviceSlots) return 0;
  Descriptor** chunk = __atomic_load_n(&g_chunks[handle / kChunkHandles], __ATOMIC_ACQUIRE);
  if (chunk == nullptr) return 0;
  __atomic_store_n(&chunk[(handle % kChunkHandles) * kDeviceSlots + slot], descriptor, __ATOMIC_RELEASE);
  return 1;
}

// The layout this module was compiled with, for _native/_handler.py to check its ctypes mirrors against:
// the table's geometry, then the descriptor's field offsets and sizes, then the XLA FFI frame offsets
// that jarp's Python path (jarp/warp/_upstream/_xla_ffi.py) reads by hand, as jaxlib's header has them.
extern const int64_t jarp_layout[] = {
    kChunkHandles,
    kMaxChunks,
    kDeviceSlots,
    static_cast<int64_t>(sizeof(Descriptor)),
    static_cast<int64_t>(__builtin_offsetof(Descriptor, nslices)),
    static_cast<int64_t>(__builtin_offsetof(Descriptor, templates)),
    static_cast<int64_t>(__builtin_offsetof(Descriptor, entry)),
    static_cast<int64_t>(__builtin_offsetof(Descriptor, params)),
    static_cast<int64_t>(__builtin_offsetof(Descriptor, failure)),
    static_cast<int64_t>(__builtin_offsetof(Descriptor, concurrent)),
    static_cast<int64_t>(__builtin_offsetof(Descriptor, tasks)),
    static_cast<int64_t>(__builtin_offsetof(Descriptor, copies)),
    static_cast<int64_t>(__builtin_offsetof(Descriptor, private_specs)),
    static_cast<int64_t>(__builtin_offsetof(Descriptor, measure)),
    static_cast<int64_t>(__builtin_offsetof(Descriptor, work)),
    static_cast<int64_t>(__builtin_offsetof(Descriptor, structs)),
    static_cast<int64_t>(sizeof(StructSpec)),
    static_cast<int64_t>(sizeof(StructState)),
    static_cast<int64_t>(sizeof(PrivateSpec)),
    static_cast<int64_t>(sizeof(Measure)),
    static_cast<int64_t>(sizeof(CopySpec)),
    static_cast<int64_t>(sizeof(BufferSpec)),
    static_cast<int64_t>(sizeof(PointerSlot)),
    static_cast<int64_t>(sizeof(ZeroFill)),
    static_cast<int64_t>(sizeof(KernelParam)),
    // XLA FFI, from jaxlib's header
    static_cast<int64_t>(__builtin_offsetof(XLA_FFI_CallFrame, extension_start)),
    static_cast<int64_t>(__builtin_offsetof(XLA_FFI_CallFrame, api)),
    static_cast<int64_t>(__builtin_offsetof(XLA_FFI_CallFrame, ctx)),
    static_cast<int64_t>(__builtin_offsetof(XLA_FFI_CallFrame, stage)),
    static_cast<int64_t>(__builtin_offsetof(XLA_FFI_CallFrame, args) + __builtin_offsetof(XLA_FFI_Args, size)),
    static_cast<int64_t>(__builtin_offsetof(XLA_FFI_CallFrame, args) + __builtin_offsetof(XLA_FFI_Args, args)),
    static_cast<int64_t>(__builtin_offsetof(XLA_FFI_CallFrame, rets) + __builtin_offsetof(XLA_FFI_Rets, size)),
    static_cast<int64_t>(__builtin_offsetof(XLA_FFI_CallFrame, rets) + __builtin_offsetof(XLA_FFI_Rets, rets)),
    static_cast<int64_t>(__builtin_offsetof(XLA_FFI_CallFrame, attrs)),
    static_cast<int64_t>(__builtin_offsetof(XLA_FFI_CallFrame, attrs) + __builtin_offsetof(XLA_FFI_Attrs, size)),
    static_cast<int64_t>(__builtin_offsetof(XLA_FFI_CallFrame, attrs) + __builtin_offsetof(XLA_FFI_Attrs, attrs)),
    static_cast<int64_t>(__builtin_offsetof(XLA_FFI_Attrs, types)),
    static_cast<int64_t>(__builtin_offsetof(XLA_FFI_Attrs, names)),
    static_cast<int64_t>(__builtin_offsetof(XLA_FFI_Buffer, dtype)),
    static_cast<int64_t>(__builtin_offsetof(XLA_FFI_Buffer, data)),
    static_cast<int64_t>(__builtin_offsetof(XLA_FFI_Buffer, rank)),
    static_cast<int64_t>(__builtin_offsetof(XLA_FFI_Buffer, dims)),
    static_cast<int64_t>(__builtin_offsetof(XLA_FFI_Scalar, value)),
    static_cast<int64_t>(__builtin_offsetof(XLA_FFI_Api, XLA_FFI_Error_Create)),
    static_cast<int64_t>(__builtin_offsetof(XLA_FFI_Api, XLA_FFI_Stream_Get)),
    static_cast<int64_t>(__builtin_offsetof(XLA_FFI_Api, XLA_FFI_DeviceOrdinal_Get)),
    static_cast<int64_t>(__builtin_offsetof(XLA_FFI_Api, XLA_FFI_State_Set)),
    static_cast<int64_t>(__builtin_offsetof(XLA_FFI_Api, XLA_FFI_State_Get)),
    static_cast<int64_t>(__builtin_offsetof(XLA_FFI_Metadata, state_type_id)),
};
extern const int64_t jarp_layout_size = sizeof(jarp_layout) / sizeof(jarp_layout[0]);

}  // extern "C"
