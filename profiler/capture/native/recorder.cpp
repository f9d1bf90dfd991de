// Native aten-operator recorder: a global RecordFunction callback that keeps, per call, the times,
// an interned signature (operator, argument shapes and dtypes), the autograd sequence numbers and
// the Python-side context (module, phase, step). Loaded with ctypes by profiler/native_capture.py;
// the hot path takes no lock and allocates only when a buffer grows or a signature is new.
//
// Which calls are kept mirrors what a dispatch-level recorder would see, one level up where that
// helps the chip mapping: an operator the mapper knows (kind MAPPED) is kept and its callees are
// not; a metadata-only operator (kind SKIP) is dropped with its callees; any other operator is kept
// only when none of its callees was kept and it is not a CompositeImplicitAutograd op (those only
// forward to others, so a leaf of that kind did no work) run as such: one that also has a kernel
// of its own for the backend of the call's first tensor (silu_backward, mish_backward on CPU) runs
// that kernel, not the composite one, and is classified as an operator without the composite
// kernel would be. A KERNEL operator is MAPPED or COMPOSITE by
// the overload called: kept whole when that overload is a kernel, looked through when it is a
// CompositeImplicitAutograd one (upsample's `.vec`, which may hold only scale factors). Under autocast, an operator with an
// autocast kernel is looked through instead of kept: that kernel casts the inputs and calls the
// operator again at the dtype it really runs at, and those calls are what is kept.
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>
#include <ATen/record_function.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <exception>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

enum Kind : int8_t { OTHER = 0, MAPPED = 1, SKIP = 2, COMPOSITE = 3, AUTOGRAD = 4, KERNEL = 5 };
enum Tag : int64_t { T_NONE = 0, T_TENSOR = 1, T_TENSORS = 2, T_INTS = 3, T_INT = 4, T_DOUBLE = 5,
                     T_BOOL = 6, T_OTHER = 7, T_OPT_TENSORS = 8 };
constexpr int kMaxListValues = 8;
constexpr int64_t kUnmatchedNode = int64_t{1} << 62;   // recording.UNMATCHED_NODE     // int lists: strides, paddings, dims; longer ones are cut

struct Record {                        // 64 bytes, read by numpy as a structured dtype
  int64_t t0, t1;                      // steady_clock (CLOCK_MONOTONIC) nanoseconds
  int64_t seq;                         // autograd sequence number when the call started
  int64_t node_seq;                    // sequence number of the backward node running it, or -1
  int64_t out_numel;
  int32_t sig, module, step, phase, tid, depth;
};

// Per operator name (per thread): its id, kind, and whether its callees are many enough that
// switching RecordFunction off around it is cheaper than ignoring each of them (learnt on its
// first call: the switch costs about as much as a few ignored callees).
struct NameEntry {
  int32_t id;
  int8_t kind;
  bool decided = false, switch_off = false;
  bool autocast = false;               // has an autocast kernel (for some device)
  c10::DispatchKeySet autocast_keys;   // the autocast keys (devices) it has a kernel for
  // A COMPOSITE operator that also has backend kernels of its own (silu_backward, mish_backward:
  // a CompositeImplicitAutograd kernel and a CPU one): those backends, on which the call runs its
  // own kernel (which calls nothing) and so is `backend_kind` (MAPPED or OTHER), not looked through.
  c10::DispatchKeySet backends;
  int8_t backend_kind = OTHER;
  int32_t n_args = -1;                 // the schema's arguments; -1: not known, or varargs
};
constexpr int64_t kSwitchOffCallees = 4;
constexpr char kEngineRange[] = "autograd::engine::evaluate_function";

struct Frame {
  int64_t t0, seq, node_seq, saved_node_seq, callees_at_start;
  NameEntry* entry;
  int32_t sig;
  int uncaught;                        // exceptions in flight when the call began
  int8_t kind;
  bool kept_below, backward, reenable;
};

struct ThreadState {
  std::atomic_flag busy = ATOMIC_FLAG_INIT;   // held while appending; collect() takes it too
  size_t records_taken = 0, sigs_taken = 0;   // what collect() has already handed out
  int32_t tid = 0;
  int64_t node_seq = -1;
  int suppress = 0;                    // > 0 while inside a MAPPED or SKIP call
  int64_t ignored_depth = 0;           // open calls inside one, which push no frame
  int64_t ignored_calls = 0;           // how many such calls so far
  std::vector<Frame> stack;
  std::vector<Record> records;
  std::vector<int64_t> key;            // scratch for signature building
  std::vector<int64_t> sig_blob;       // signatures, each prefixed by its length
  std::unordered_multimap<uint64_t, std::pair<int32_t, int64_t>> sig_index;  // hash -> (id, offset)
  int32_t n_sigs = 0;
  std::unordered_map<const void*, NameEntry> names;  // by operator name pointer (stable nodes)
};

std::mutex g_mutex;                    // guards the tables below; never taken per call
std::vector<ThreadState*> g_threads;
std::vector<std::string> g_names;
std::unordered_map<std::string, int32_t> g_name_ids;
std::unordered_map<std::string, int8_t> g_kinds;
at::CallbackHandle g_handle = 0;
std::atomic<int32_t> g_generation{0};
int64_t g_context[4] = {0, 0, 1, 0};  // module id, phase, step (written by Python hooks), spare

thread_local ThreadState* t_state = nullptr;
thread_local int32_t t_generation = -1;

ThreadState* state() {
  int32_t gen = g_generation.load(std::memory_order_relaxed);
  if (t_state == nullptr || t_generation != gen) {
    std::lock_guard<std::mutex> lock(g_mutex);
    t_state = new ThreadState();
    t_state->tid = static_cast<int32_t>(g_threads.size());
    t_state->stack.reserve(64);
    t_state->records.reserve(1 << 14);
    g_threads.push_back(t_state);
    t_generation = gen;
  }
  return t_state;
}

int32_t intern_name(const std::string& name, int8_t* kind) {
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_name_ids.find(name);
  int32_t id;
  if (it == g_name_ids.end()) {
    id = static_cast<int32_t>(g_names.size());
    g_names.push_back(name);
    g_name_ids.emplace(name, id);
  } else {
    id = it->second;
  }
  auto k = g_kinds.find(name);
  *kind = k == g_kinds.end() ? OTHER : k->second;
  // other autograd ranges only frame the operators they run
  if (k == g_kinds.end() && name.rfind("autograd::", 0) == 0) *kind = COMPOSITE;
  return id;
}

NameEntry classify(const at::RecordFunction& fn, int32_t id, int8_t kind) {
  NameEntry entry{id, kind == KERNEL ? static_cast<int8_t>(MAPPED) : kind};
  auto op_name = fn.operator_name();
  if (!op_name) return entry;
  auto handle = c10::Dispatcher::singleton().findOp(*op_name);
  if (!handle) return entry;
  if (handle->hasSchema() && !handle->schema().is_vararg()) {
    entry.n_args = static_cast<int32_t>(handle->schema().arguments().size());
  }
  auto composite = c10::DispatchKey::CompositeImplicitAutograd;
  if ((kind == OTHER || kind == KERNEL) && handle->hasKernelForDispatchKey(composite)) {
    // The CompositeImplicitAutograd kernel runs only on backends without a kernel of their own.
    for (c10::DispatchKey k : {c10::DispatchKey::CPU, c10::DispatchKey::CUDA, c10::DispatchKey::XPU,
                               c10::DispatchKey::MPS, c10::DispatchKey::HIP, c10::DispatchKey::XLA,
                               c10::DispatchKey::PrivateUse1}) {
      if (handle->hasKernelForDispatchKey(k)) entry.backends = entry.backends | c10::DispatchKeySet(k);
    }
    entry.backend_kind = entry.kind;
    entry.kind = COMPOSITE;
  }
  for (c10::DispatchKey k : c10::autocast_dispatch_keyset) {
    if (handle->hasKernelForDispatchKey(k)) entry.autocast_keys = entry.autocast_keys | c10::DispatchKeySet(k);
    entry.autocast = !entry.autocast_keys.empty();
  }
  return entry;
}

// A call's own arguments. The TorchScript interpreter's ranges (a scripted model's backward graph)
// pass the top of its stack, which can hold values from below the call's arguments
// (`aten::matmul [[32], [32, 8], [8, 32]]`): its arguments are the last n_args.
c10::ArrayRef<c10::IValue> args_of(const at::RecordFunction& fn, const NameEntry* entry) {
  auto inputs = fn.inputs();
  if (entry == nullptr || entry->n_args < 0) return inputs;
  auto n = static_cast<size_t>(entry->n_args);
  return inputs.size() > n ? inputs.slice(inputs.size() - n) : inputs;
}

const at::Tensor* first_tensor(const at::RecordFunction& fn, const NameEntry* entry) {
  for (const auto& v : args_of(fn, entry)) {
    if (v.isTensor() && v.toTensor().defined()) return &v.toTensor();
  }
  return nullptr;
}

// Whether autocast handles this call: autocast is on for the device of its first tensor (its
// key is not excluded in this thread; the autocast kernel excludes it while it calls the
// operator again, so that inner call is kept) and the operator has an autocast kernel for that
// device (`kernels`). Where it has none (layer_norm on CPU: its autocast kernels are CUDA's and
// others') the autocast key falls through and the call runs as it is, so it is kept.
bool autocast_applies(const at::RecordFunction& fn, const NameEntry* entry) {
  auto on = (c10::autocast_dispatch_keyset - c10::impl::tls_local_dispatch_key_set().excluded_) &
            entry->autocast_keys;
  if (on.empty()) return false;        // autocast off: one thread-local read
  const at::Tensor* t = first_tensor(fn, entry);
  return t && !(t->key_set() & on).empty();
}

// Calls that a Python dispatch mode or tensor subclass handles (torch.compile traces with fake
// tensors, a DTensor runs its local shards) or that work on meta tensors (which hold no data)
// are looked through: the real work they lead to, if any, is done by the calls below them.
bool not_real(const at::RecordFunction& fn, const NameEntry* entry) {
  if (c10::impl::tls_is_dispatch_key_included(c10::DispatchKey::Python)) return true;
  const at::Tensor* t = first_tensor(fn, entry);
  return t && (t->is_meta() || t->key_set().has(c10::DispatchKey::Python));
}

// Operator names live as long as the operator registry, so their pointers are a safe cache key;
// other ranges (the autograd engine's, record_function's) carry their own strings, looked up by
// text each time (they are few) and get no entry.
NameEntry* name_of(ThreadState* st, const at::RecordFunction& fn, NameEntry* scratch) {
  const char* name = fn.name();
  auto it = st->names.find(name);     // only operators are cached, and no other string can
  if (it != st->names.end()) return &it->second;   // live at an operator name's address
  if (std::strncmp(name, kEngineRange, sizeof kEngineRange - 1) == 0) {   // one per backward node
    *scratch = NameEntry{-1, AUTOGRAD};
    return scratch;
  }
  bool is_operator = fn.operator_name().has_value();
  int8_t kind;
  int32_t id = intern_name(name, &kind);
  if (!is_operator) {
    *scratch = NameEntry{id, kind == KERNEL ? static_cast<int8_t>(MAPPED) : kind};
    return scratch;
  }
  return &st->names.emplace(name, classify(fn, id, kind)).first->second;
}

int64_t dtype_code(const at::Tensor& t) { return static_cast<int64_t>(t.scalar_type()); }

// Elements of a tensor, 0 where it cannot say (a tensor subclass whose numel raises).
int64_t safe_numel(const at::Tensor& t) noexcept {
  try {
    return t.numel();
  } catch (...) {
    return 0;
  }
}

// A tensor's rank and sizes. A tensor that has none (a nested tensor's components differ in
// shape: sym_sizes() raises) is written as one dimension of its element count.
void push_shape(std::vector<int64_t>& key, const at::Tensor& t) {
  if (!t.is_nested()) {
    try {
      auto sizes = t.sym_sizes();
      key.push_back(static_cast<int64_t>(sizes.size()));
      for (const auto& s : sizes) key.push_back(s.is_heap_allocated() ? -1 : s.as_int_unchecked());
      return;
    } catch (...) {
    }
  }
  key.push_back(1);
  key.push_back(safe_numel(t));
}

void push_value(std::vector<int64_t>& key, const c10::IValue& v) {
  if (v.isTensor()) {
    const at::Tensor& t = v.toTensor();
    if (!t.defined()) { key.push_back(T_NONE); return; }
    key.push_back(T_TENSOR);
    key.push_back(dtype_code(t));
    push_shape(key, t);
  } else if (v.isTensorList()) {
    auto list = v.toTensorList();
    int64_t numel = 0, dtype = -1;
    for (const at::Tensor& t : list) {
      if (!t.defined()) continue;
      numel += safe_numel(t);
      if (dtype < 0) dtype = dtype_code(t);
    }
    key.push_back(T_TENSORS);
    key.push_back(dtype);
    key.push_back(static_cast<int64_t>(list.size()));
    key.push_back(numel);
  } else if (v.isOptionalTensorList()) {   // index()'s indices: a shape each, -1 for a `:`
    auto list = v.toOptionalTensorList();
    key.push_back(T_OPT_TENSORS);
    key.push_back(static_cast<int64_t>(list.size()));
    for (const std::optional<at::Tensor>& t : list) {
      if (!t.has_value() || !t->defined()) { key.push_back(-1); continue; }
      key.push_back(dtype_code(*t));
      push_shape(key, *t);
    }
  } else if (v.isIntList()) {
    auto list = v.toIntList();
    int64_t n = static_cast<int64_t>(list.size());
    int64_t kept = n < kMaxListValues ? n : kMaxListValues;
    key.push_back(T_INTS);
    key.push_back(kept);
    for (int64_t i = 0; i < kept; ++i) key.push_back(list.get(i));
  } else if (v.isBoolList()) {             // output_mask of the backward ops: as 0/1 ints
    auto list = v.toBoolList();
    int64_t n = static_cast<int64_t>(list.size());
    int64_t kept = n < kMaxListValues ? n : kMaxListValues;
    key.push_back(T_INTS);
    key.push_back(kept);
    for (int64_t i = 0; i < kept; ++i) key.push_back(list.get(i) ? 1 : 0);
  } else if (v.isInt()) {
    key.push_back(T_INT);
    key.push_back(v.toInt());
  } else if (v.isDouble()) {
    double d = v.toDouble();
    int64_t bits;
    std::memcpy(&bits, &d, sizeof bits);
    key.push_back(T_DOUBLE);
    key.push_back(bits);
  } else if (v.isBool()) {
    key.push_back(T_BOOL);
    key.push_back(v.toBool() ? 1 : 0);
  } else if (v.isNone()) {
    key.push_back(T_NONE);
  } else {
    key.push_back(T_OTHER);
  }
}

uint64_t hash_key(const std::vector<int64_t>& key) {
  uint64_t h = 1469598103934665603ull;
  for (int64_t x : key) {
    h ^= static_cast<uint64_t>(x);
    h *= 1099511628211ull;
    h ^= h >> 29;
  }
  return h;
}

int32_t intern_signature(ThreadState* st, const NameEntry* entry, const at::RecordFunction& fn) {
  auto& key = st->key;
  key.clear();
  key.push_back(entry->id);
  auto inputs = args_of(fn, entry);
  key.push_back(static_cast<int64_t>(inputs.size()));
  for (const auto& v : inputs) push_value(key, v);
  uint64_t h = hash_key(key);
  auto range = st->sig_index.equal_range(h);
  for (auto it = range.first; it != range.second; ++it) {
    int64_t off = it->second.second;
    if (st->sig_blob[off] == static_cast<int64_t>(key.size()) &&
        std::memcmp(&st->sig_blob[off + 1], key.data(), key.size() * sizeof(int64_t)) == 0) {
      return it->second.first;
    }
  }
  int32_t id = st->n_sigs++;
  while (st->busy.test_and_set(std::memory_order_acquire)) {
  }
  int64_t off = static_cast<int64_t>(st->sig_blob.size());
  st->sig_blob.push_back(static_cast<int64_t>(key.size()));
  st->sig_blob.insert(st->sig_blob.end(), key.begin(), key.end());
  st->busy.clear(std::memory_order_release);
  st->sig_index.emplace(h, std::make_pair(id, off));
  return id;
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Works out the frame of a call that is not inside a kept or skipped one. Everything that may
// raise (a signature's argument sizes, the operator's lookup) is done before any state changes,
// and the state (suppress, the node sequence number, RecordFunction's switch) is changed only
// when the frame is sure to be pushed, so on_exit always undoes what on_enter did.
Frame enter_frame(ThreadState* st, const at::RecordFunction& fn) {
  Frame f{};
  f.saved_node_seq = st->node_seq;
  f.sig = -1;
  f.kind = -1;                        // not an operator: nothing to keep on exit
  f.seq = fn.seqNr();
  f.node_seq = st->node_seq;
  if (fn.scope() == at::RecordScope::BACKWARD_FUNCTION) {
    // a backward node: its sequence number is the forward call's. It stays set after the node
    // returns, for the engine's fix-ups of its gradients (sum_to of broadcast ones) that run
    // inside the enclosing evaluate_function range, which restores the previous value.
    bool in_engine_range = !st->stack.empty() && st->stack.back().backward;
    f.backward = !in_engine_range;
    st->node_seq = f.node_seq = fn.seqNr() >= 0 ? fn.seqNr() : kUnmatchedNode;
    return f;
  }
  NameEntry scratch{};
  NameEntry* entry = name_of(st, fn, &scratch);
  int8_t kind = entry->kind;
  if (kind == COMPOSITE && !entry->backends.empty()) {   // runs its own kernel on these backends
    const at::Tensor* t = first_tensor(fn, entry);
    if (t && !(t->key_set() & entry->backends).empty()) kind = entry->backend_kind;
  }
  if ((kind == MAPPED || kind == OTHER) && not_real(fn, entry)) kind = COMPOSITE;
  if (kind == MAPPED && entry->autocast && autocast_applies(fn, entry)) kind = COMPOSITE;
  // only a call that may be kept needs its signature
  int32_t sig = kind == MAPPED || kind == OTHER ? intern_signature(st, entry, fn) : -1;
  f.sig = sig;
  if (kind == AUTOGRAD) {
    // the engine's range around a node; AccumulateGrad and other nodes made by no forward
    // call have no sequence number
    f.backward = true;
    st->node_seq = f.node_seq = kUnmatchedNode;
    kind = COMPOSITE;
  }
  f.kind = kind;
  if (kind == MAPPED || kind == SKIP) {
    st->suppress++;
    f.entry = entry == &scratch ? nullptr : entry;
    f.callees_at_start = st->ignored_calls;
    // An operator known to make many calls gets RecordFunction switched off for this thread
    // until it returns, so its callees take the dispatcher's fast path.
    if (f.entry && f.entry->switch_off && at::isRecordFunctionEnabled()) {
      at::enableRecordFunction(false);
      f.reenable = true;
    }
  }
  return f;
}

// A RecordFunction callback must not raise: torch prints the exception's whole trace and the
// call's on_exit still runs, which would pop a frame this call never pushed. A call whose frame
// cannot be worked out gets one that keeps nothing (its callees are recorded instead).
std::unique_ptr<at::ObserverContext> on_enter(const at::RecordFunction& fn) {
  ThreadState* st = state();
  if (st->suppress > 0) {              // a callee of a kept or skipped operator: count, nothing else
    st->ignored_depth++;
    st->ignored_calls++;
    return nullptr;
  }
  Frame f{};
  try {
    f = enter_frame(st, fn);
  } catch (...) {
    f = Frame{};
    f.saved_node_seq = f.node_seq = st->node_seq;
    f.seq = -1;
    f.sig = -1;
    f.kind = -1;
  }
  f.uncaught = std::uncaught_exceptions();
  f.t0 = now_ns();
  st->stack.push_back(f);
  return nullptr;
}

void on_exit(const at::RecordFunction& fn, at::ObserverContext*) {
  int64_t t1 = now_ns();
  ThreadState* st = state();
  if (st->ignored_depth > 0) {
    st->ignored_depth--;
    return;
  }
  if (st->stack.empty()) return;      // callback added while this call was running
  Frame f = st->stack.back();
  st->stack.pop_back();
  if (f.backward) st->node_seq = f.saved_node_seq;
  if (f.kind == MAPPED || f.kind == SKIP) {
    st->suppress--;
    if (f.entry && !f.entry->decided) {
      f.entry->decided = true;
      f.entry->switch_off = st->ignored_calls - f.callees_at_start >= kSwitchOffCallees;
    }
  }
  if (f.reenable) at::enableRecordFunction(true);
  // A call that raised (a shape error caught by the script, the early stop of a non-reentrant
  // checkpoint's recompute) ran no kernel: its end callback runs while the exception unwinds.
  if (std::uncaught_exceptions() > f.uncaught) return;
  bool keep = f.kind == MAPPED || ((f.kind == OTHER) && !f.kept_below);
  if (keep && f.sig >= 0) {
    int64_t out_numel = -1;           // not asked for: worked out from the arguments later
    if (fn.needsOutputs()) {
      out_numel = 0;
      for (const auto& v : fn.outputs()) {
        if (v.isTensor() && v.toTensor().defined()) out_numel += safe_numel(v.toTensor());
      }
    }
    Record r{f.t0, t1, f.seq, f.node_seq, out_numel, f.sig,
             static_cast<int32_t>(g_context[0]), static_cast<int32_t>(g_context[2]),
             static_cast<int32_t>(g_context[1]), st->tid, static_cast<int32_t>(st->stack.size())};
    while (st->busy.test_and_set(std::memory_order_acquire)) {
    }
    st->records.push_back(r);
    st->busy.clear(std::memory_order_release);
  }
  if ((keep || f.kept_below) && !st->stack.empty()) st->stack.back().kept_below = true;
}

// What collect() hands to Python: records and signatures new since the previous collect().
std::vector<Record> c_records;
std::vector<int64_t> c_sigs;           // per new signature: thread id, key length, key...
std::string c_names;

}  // namespace

extern "C" {

int64_t* ns_context() { return g_context; }

// kinds: "name\tkind\n" lines, kind 1 = MAPPED, 2 = SKIP, 3 = COMPOSITE, 5 = KERNEL. Returns -1 when already
// recording.
int ns_start(const char* kinds, int with_outputs) {
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (g_handle != 0) return -1;
    for (ThreadState* st : g_threads) delete st;
    g_threads.clear();
    g_names.clear();
    g_name_ids.clear();
    g_kinds.clear();
    g_generation.fetch_add(1);
    for (const char* p = kinds; p && *p;) {
      const char* tab = std::strchr(p, '\t');
      const char* end = std::strchr(p, '\n');
      if (!tab || !end || tab > end) break;
      g_kinds[std::string(p, tab)] = static_cast<int8_t>(std::atoi(tab + 1));
      p = end + 1;
    }
    g_context[0] = 0;
    g_context[1] = 0;
    g_context[2] = 1;
  }
  state();                             // the starting thread is thread 0
  auto cb = at::RecordFunctionCallback(on_enter, on_exit)
                .needsInputs(true)
                .needsOutputs(with_outputs != 0)
                .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION});
  std::lock_guard<std::mutex> lock(g_mutex);
  g_handle = at::addGlobalCallback(cb);
  return 0;
}

// Gathers what every thread recorded since the last call; with stop != 0 the callback is removed
// first. Returns the number of new records.
int64_t ns_collect(int stop) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (stop && g_handle != 0) {
    at::removeCallback(g_handle);
    g_handle = 0;
  }
  c_records.clear();
  c_sigs.clear();
  c_names.clear();
  for (ThreadState* st : g_threads) {
    while (st->busy.test_and_set(std::memory_order_acquire)) {
    }
    for (size_t off = st->sigs_taken; off < st->sig_blob.size(); off += st->sig_blob[off] + 1) {
      c_sigs.push_back(st->tid);
      c_sigs.insert(c_sigs.end(), st->sig_blob.begin() + off, st->sig_blob.begin() + off + st->sig_blob[off] + 1);
    }
    st->sigs_taken = st->sig_blob.size();
    c_records.insert(c_records.end(), st->records.begin() + st->records_taken, st->records.end());
    st->records_taken = st->records.size();
    st->busy.clear(std::memory_order_release);
  }
  for (const auto& n : g_names) {
    c_names += n;
    c_names.push_back('\n');
  }
  return static_cast<int64_t>(c_records.size());
}

const void* ns_records() { return c_records.data(); }
int64_t ns_sig_size() { return static_cast<int64_t>(c_sigs.size()); }
const int64_t* ns_sigs() { return c_sigs.data(); }
const char* ns_names() { return c_names.c_str(); }
int64_t ns_record_size() { return static_cast<int64_t>(sizeof(Record)); }

void ns_release() {
  std::lock_guard<std::mutex> lock(g_mutex);
  std::vector<Record>().swap(c_records);
  std::vector<int64_t>().swap(c_sigs);
  std::string().swap(c_names);
  for (ThreadState* st : g_threads) delete st;
  g_threads.clear();
  g_generation.fetch_add(1);
}

}  // extern "C"
