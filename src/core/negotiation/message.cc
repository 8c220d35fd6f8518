#include "core/negotiation/message.h"

#include <cstring>
#include <sstream>

#include "common/kernels.h"

namespace hvd {

namespace {
constexpr uint32_t kMessageMagic = 0x68766431;  // "hvd1"
constexpr uint32_t kMaxItems = 1u << 24;
}  // namespace

bool RequestDesc::operator==(const RequestDesc& o) const {
  return key == o.key && type == o.type && reduce_op == o.reduce_op && dtype == o.dtype &&
         device == o.device && root == o.root &&
         std::memcmp(&prescale, &o.prescale, sizeof(double)) == 0 &&
         std::memcmp(&postscale, &o.postscale, sizeof(double)) == 0 && names == o.names &&
         shapes == o.shapes && splits == o.splits;
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? "," : "") << shape[i];
  os << "]";
  return os.str();
}

std::string RequestDesc::Describe() const {
  std::ostringstream os;
  os << OpTypeName(type) << " '" << key << "'";
  if (type == OpType::kBarrier || type == OpType::kJoin || type == OpType::kCloseSet) return os.str();
  os << " " << DtypeName(dtype);
  if (shapes.size() == 1) {
    os << ShapeString(shapes[0]);
  } else {
    os << " group of " << shapes.size();
  }
  if (type == OpType::kAllreduce || type == OpType::kReducescatter) {
    os << " " << ReduceOpName(reduce_op);
    if (prescale != 1.0) os << " prescale=" << prescale;
    if (postscale != 1.0) os << " postscale=" << postscale;
  }
  if (type == OpType::kBroadcast) os << " root=" << root;
  if (device != HVD_DEVICE_CPU) os << " device=" << device;
  return os.str();
}

RequestDesc DescFromRequest(const OpRequest& req) {
  RequestDesc d;
  d.key = req.tensors.front().name;
  d.type = req.type;
  d.reduce_op = req.reduce_op;
  d.dtype = req.tensors.front().dtype;
  d.device = req.tensors.front().device;
  d.root = req.root;
  d.prescale = req.prescale;
  d.postscale = req.postscale;
  for (const TensorSpec& t : req.tensors) {
    d.names.push_back(t.name);
    d.shapes.push_back(t.shape.vec());
  }
  d.splits = req.splits;
  return d;
}

bool DescribesRequest(const RequestDesc& d, const OpRequest& req, bool key_matched) {
  if (req.tensors.empty() || d.names.size() != req.tensors.size()) return false;
  const TensorSpec& t0 = req.tensors.front();
  if ((!key_matched && d.key != t0.name) || d.type != req.type || d.reduce_op != req.reduce_op ||
      d.dtype != t0.dtype || d.device != t0.device || d.root != req.root ||
      std::memcmp(&d.prescale, &req.prescale, sizeof(double)) != 0 ||
      std::memcmp(&d.postscale, &req.postscale, sizeof(double)) != 0 || d.splits != req.splits) {
    return false;
  }
  // The first name is the key.
  for (size_t i = 0; i < req.tensors.size(); ++i) {
    if ((i > 0 || !key_matched) && d.names[i] != req.tensors[i].name) return false;
    if (d.shapes[i] != req.tensors[i].shape) return false;
  }
  return true;
}

void ByteWriter::U32(uint32_t v) {
  for (int i = 3; i >= 0; --i) buf_.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
void ByteWriter::U64(uint64_t v) {
  for (int i = 7; i >= 0; --i) buf_.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
void ByteWriter::F64(double v) {
  uint64_t u;
  std::memcpy(&u, &v, sizeof(u));
  U64(u);
}
void ByteWriter::Str(const std::string& s) {
  U32(static_cast<uint32_t>(s.size()));
  buf_.insert(buf_.end(), s.begin(), s.end());
}

bool ByteReader::U8(uint8_t* v) {
  if (end_ - p_ < 1) return false;
  *v = *p_++;
  return true;
}
bool ByteReader::U32(uint32_t* v) {
  if (end_ - p_ < 4) return false;
  uint32_t r = 0;
  for (int i = 0; i < 4; ++i) r = (r << 8) | *p_++;
  *v = r;
  return true;
}
bool ByteReader::U64(uint64_t* v) {
  if (end_ - p_ < 8) return false;
  uint64_t r = 0;
  for (int i = 0; i < 8; ++i) r = (r << 8) | *p_++;
  *v = r;
  return true;
}
bool ByteReader::I64(int64_t* v) {
  uint64_t u;
  if (!U64(&u)) return false;
  *v = static_cast<int64_t>(u);
  return true;
}
bool ByteReader::F64(double* v) {
  uint64_t u;
  if (!U64(&u)) return false;
  std::memcpy(v, &u, sizeof(u));
  return true;
}
bool ByteReader::Str(std::string* s) {
  uint32_t n;
  if (!U32(&n) || static_cast<size_t>(end_ - p_) < n) return false;
  s->assign(reinterpret_cast<const char*>(p_), n);
  p_ += n;
  return true;
}

namespace {

void EncodeDesc(const RequestDesc& d, ByteWriter* w) {
  w->Str(d.key);
  w->U8(static_cast<uint8_t>(d.type));
  w->U8(static_cast<uint8_t>(d.reduce_op));
  w->U8(static_cast<uint8_t>(d.dtype));
  w->U32(static_cast<uint32_t>(d.device));
  w->U32(static_cast<uint32_t>(d.root));
  w->F64(d.prescale);
  w->F64(d.postscale);
  w->U32(static_cast<uint32_t>(d.names.size()));
  for (size_t i = 0; i < d.names.size(); ++i) {
    w->Str(d.names[i]);
    w->U32(static_cast<uint32_t>(d.shapes[i].size()));
    for (int64_t x : d.shapes[i]) w->I64(x);
  }
  w->U32(static_cast<uint32_t>(d.splits.size()));
  for (int64_t x : d.splits) w->I64(x);
}

bool DecodeDesc(ByteReader* r, RequestDesc* d) {
  uint8_t type, op, dtype;
  uint32_t device, root, n;
  if (!r->Str(&d->key) || !r->U8(&type) || !r->U8(&op) || !r->U8(&dtype) || !r->U32(&device) ||
      !r->U32(&root) || !r->F64(&d->prescale) || !r->F64(&d->postscale) || !r->U32(&n)) {
    return false;
  }
  if (type > static_cast<uint8_t>(OpType::kCloseSet) || op > HVD_ADASUM || !IsValidDtype(dtype) ||
      n > kMaxItems || n == 0) {
    return false;
  }
  d->type = static_cast<OpType>(type);
  d->reduce_op = static_cast<hvd_reduce_op_t>(op);
  d->dtype = static_cast<hvd_dtype_t>(dtype);
  d->device = static_cast<int32_t>(device);
  d->root = static_cast<int32_t>(root);
  d->names.resize(n);
  d->shapes.resize(n);
  for (uint32_t i = 0; i < n; ++i) {
    uint32_t nd;
    if (!r->Str(&d->names[i]) || !r->U32(&nd) || nd > HVD_MAX_NDIM) return false;
    d->shapes[i].resize(nd);
    for (uint32_t j = 0; j < nd; ++j) {
      if (!r->I64(&d->shapes[i][j])) return false;
    }
  }
  uint32_t ns;
  if (!r->U32(&ns) || ns > kMaxItems) return false;
  d->splits.resize(ns);
  for (uint32_t j = 0; j < ns; ++j) {
    if (!r->I64(&d->splits[j])) return false;
  }
  return true;
}

void EncodeStrings(const std::vector<std::string>& v, ByteWriter* w) {
  w->U32(static_cast<uint32_t>(v.size()));
  for (const auto& s : v) w->Str(s);
}

bool DecodeStrings(ByteReader* r, std::vector<std::string>* v) {
  uint32_t n;
  if (!r->U32(&n) || n > kMaxItems) return false;
  v->resize(n);
  for (auto& s : *v) {
    if (!r->Str(&s)) return false;
  }
  return true;
}

}  // namespace

void EncodeRankMessage(const RankMessage& m, ByteWriter* w) {
  w->U32(kMessageMagic);
  w->U32(static_cast<uint32_t>(m.requests.size()));
  for (const auto& d : m.requests) EncodeDesc(d, w);
  w->U8(static_cast<uint8_t>((m.stall_report ? 1 : 0) | (m.stall_warning ? 2 : 0)));
  if (m.stall_report) {
    EncodeStrings(m.pending, w);
    EncodeStrings(m.expired, w);
  }
}

Status DecodeRankMessage(const uint8_t* p, size_t n, RankMessage* m) {
  ByteReader r(p, n);
  uint32_t magic, count;
  auto bad = [] { return Error(HVD_ERR_INTERNAL, "malformed negotiation message from a peer"); };
  if (!r.U32(&magic) || magic != kMessageMagic) {
    return Error(HVD_ERR_VERSION,
                 "negotiation message from a peer has an unknown format (mixed hvd versions?)");
  }
  if (!r.U32(&count) || count > kMaxItems) return bad();
  m->requests.resize(count);
  for (auto& d : m->requests) {
    if (!DecodeDesc(&r, &d)) return bad();
  }
  uint8_t stall;
  if (!r.U8(&stall)) return bad();
  if (stall > 3) return bad();
  m->stall_report = (stall & 1) != 0;
  m->stall_warning = (stall & 2) != 0;
  if (m->stall_report) {
    if (!DecodeStrings(&r, &m->pending) || !DecodeStrings(&r, &m->expired)) return bad();
  }
  if (!r.done()) return bad();
  return Status::Ok();
}

}  // namespace hvd
