// The wire format of the packed negotiation beyond the controller's own
// bytes: each process set's slot header, and the encoding of the control
// bytes when a small allreduce rides in the negotiation (HVD_PIGGYBACK).
#pragma once

#include <cstddef>
#include <cstdint>

#include "hvd.h"

namespace hvd {

// The control bytes of one process-set slot in the packed negotiation:
// [0] 0 while some member holds the set, [1] 255 - the member's count of
// requests pending in it (at most 254; so 255 - the most any member has),
// [2..3] the set's cache extent (Controller::slot_extent, in kExtentSteps,
// big-endian: the same on every member), then the set's controller's bytes
// for as many cache slots as the extent the last negotiation showed (the
// ranks outside a set know no more). 0xFF (MIN's identity) from ranks
// outside the set and for free slots.
constexpr size_t kSlotHeader = 4;
constexpr uint8_t kMaxPendingCount = 254;

// Writes this member's header of a set whose cache extent is `extent`
// slots (in steps of `step`) with `pending` requests pending here.
void EncodeSlotHeader(uint8_t* p, size_t extent, size_t step, size_t pending);

// What a slot's header says after the negotiation's MIN.
struct SlotHeader {
  bool held = false;        // some member still holds the set
  size_t extent = 0;        // the set's cache extent (slots; a multiple of step)
  size_t most_pending = 0;  // the most requests any member has pending (kMaxPendingCount: or more)
};
SlotHeader DecodeSlotHeader(const uint8_t* p, size_t step);

// ---- A small allreduce in the negotiation (HVD_PIGGYBACK) ---------------
//
// The negotiation's allreduce then runs in the small tensor's dtype and
// (transport) op: each control byte becomes one number, chosen so that the
// numbers' reduction under that op says what the bytes' MIN would, then
// the tensor follows. Flags (0/1; every byte but the autotuning proposal):
// SUM adds them (all set: the size), MIN and PRODUCT keep 1 only where all
// are 1, MAX takes 1 - flag (all set: 0). The proposal is rank 0's: every
// other rank contributes the op's identity. Exact wherever the dtype holds
// the integers involved (0..255, and the size for SUM).
constexpr size_t kPiggybackMaxBytes = 1024;
constexpr size_t kProposalByte = 3;

// The largest integer up to which every integer is exact in dtype (0: not
// used: int8 cannot hold 255, bool's SUM is an or).
double ExactIntegers(hvd_dtype_t d);

// Encodes ctrl[0, head) into out (numbers of dtype d for transport op op).
void EncodeControl(uint8_t* out, const uint8_t* ctrl, size_t head, hvd_dtype_t d,
                   hvd_reduce_op_t op, bool rank0);

// Bytes each rank owns a part of (the others send 0xFF, MIN's identity):
// this rank's ctrl[mine, mine + len) as numbers, the op's identity elsewhere.
void EncodeOwned(uint8_t* out, const uint8_t* ctrl, size_t n, hvd_dtype_t d, hvd_reduce_op_t op,
                 size_t mine, size_t len);
void DecodeOwned(uint8_t* ctrl, const uint8_t* in, size_t n, hvd_dtype_t d);

// The bytes a MIN over the ranks' control bytes would have given.
void DecodeControl(uint8_t* ctrl, const uint8_t* in, size_t head, hvd_dtype_t d,
                   hvd_reduce_op_t op, int size);

}  // namespace hvd
