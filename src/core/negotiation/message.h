// Control-plane messages: what a rank tells the others about a request, and
// their byte encoding. Decoding is bounds-checked: a malformed message is an
// error, never a crash.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "core/loop/request.h"

namespace hvd {

// A request as the other ranks see it: no pointers.
struct RequestDesc {
  std::string key;  // negotiation key: the (first) tensor's name
  OpType type = OpType::kAllreduce;
  hvd_reduce_op_t reduce_op = HVD_SUM;
  hvd_dtype_t dtype = HVD_FLOAT32;
  int32_t device = HVD_DEVICE_CPU;
  int32_t root = 0;
  double prescale = 1.0;
  double postscale = 1.0;
  std::vector<std::string> names;            // one per tensor (groups: several)
  std::vector<std::vector<int64_t>> shapes;  // one per tensor
  std::vector<int64_t> splits;               // alltoall

  bool operator==(const RequestDesc& o) const;
  bool operator!=(const RequestDesc& o) const { return !(*this == o); }
  // "allreduce 'w' float32[2,3] sum" — for error messages.
  std::string Describe() const;
};

RequestDesc DescFromRequest(const OpRequest& req);
// DescFromRequest(req) == d, without building the descriptor (the steady
// state: every step's request matches its cached descriptor). key_matched:
// the caller found d by the request's key (its first tensor's name), which
// is then not compared again (a frontend's names run to dozens of bytes).
bool DescribesRequest(const RequestDesc& d, const OpRequest& req, bool key_matched = false);
std::string ShapeString(const std::vector<int64_t>& shape);

// What one rank sends in a full negotiation round.
struct RankMessage {
  std::vector<RequestDesc> requests;   // newly announced, not served by the cache
  bool stall_report = false;           // the following two lists are filled
  bool stall_warning = false;          // a stall warning is due here (rank 0 logs it)
  std::vector<std::string> pending;    // every key this rank has pending
  std::vector<std::string> expired;    // keys pending longer than the stall shutdown time
};

class ByteWriter {
 public:
  void U8(uint8_t v) { buf_.push_back(v); }
  void U32(uint32_t v);
  void U64(uint64_t v);
  void I64(int64_t v) { U64(static_cast<uint64_t>(v)); }
  void F64(double v);
  void Str(const std::string& s);
  std::vector<uint8_t>& bytes() { return buf_; }

 private:
  std::vector<uint8_t> buf_;
};

class ByteReader {
 public:
  ByteReader(const uint8_t* p, size_t n) : p_(p), end_(p + n) {}
  bool U8(uint8_t* v);
  bool U32(uint32_t* v);
  bool U64(uint64_t* v);
  bool I64(int64_t* v);
  bool F64(double* v);
  bool Str(std::string* s);
  bool done() const { return p_ == end_; }

 private:
  const uint8_t* p_;
  const uint8_t* end_;
};

void EncodeRankMessage(const RankMessage& m, ByteWriter* w);
Status DecodeRankMessage(const uint8_t* p, size_t n, RankMessage* m);

}  // namespace hvd
