// The MPI transport's native collectives: MPI's nonblocking collectives.
#include "comm.h"

namespace hvd_mpi_transport {

// ---- native collectives -----------------------------------------------------

// The MPI datatype and op for (dtype, op), and the element size; float16 and
// bfloat16 reduce with the core's kernel in user-defined ops, bool as bytes
// with logical or (SUM, MAX) and and (MIN, PRODUCT).
size_t MpiTypeOp(hvd_dtype_t d, hvd_reduce_op_t op, MPI_Datatype* t, MPI_Op* o) {
  const MPI_Datatype types[] = {MPI_UINT8_T, MPI_INT8_T,  MPI_UINT16_T, MPI_INT16_T,
                                MPI_INT32_T, MPI_INT64_T, MPI_UINT16_T, MPI_UINT16_T,
                                MPI_FLOAT,   MPI_DOUBLE,  MPI_UINT8_T};
  const size_t sizes[] = {1, 1, 2, 2, 4, 8, 2, 2, 4, 8, 1};
  const MPI_Op ops[] = {MPI_SUM, MPI_OP_NULL, MPI_MIN, MPI_MAX, MPI_PROD};  // by hvd_reduce_op_t
  if (d < HVD_UINT8 || d > HVD_BOOL || op < HVD_SUM || op > HVD_PRODUCT || op == HVD_AVERAGE) {
    Throw(HVD_ERR_INVALID_ARGUMENT,
          "mpi: bad dtype " + std::to_string(d) + " or op " + std::to_string(op));
  }
  *t = types[d];
  *o = ops[op];
  if (d == HVD_BOOL) *o = op == HVD_MIN || op == HVD_PRODUCT ? MPI_LAND : MPI_LOR;
  if (d == HVD_FLOAT16 || d == HVD_BFLOAT16) {
    if (g_reduce.load() == nullptr) Throw(HVD_ERR_UNSUPPORTED, "mpi: float16 needs env.reduce");
    *o = Proc().half_ops[d == HVD_FLOAT16 ? 0 : 1][op == HVD_SUM ? 0 : op - 1];
  }
  return sizes[d];
}

const hvd_transport_buffer_t& Host(const hvd_transport_buffer_t* b, const char* what) {
  if (b == nullptr || (b->data == nullptr && b->bytes > 0))
    Throw(HVD_ERR_INVALID_ARGUMENT, std::string("mpi ") + what + ": NULL buffer");
  if (b->memory_type != HVD_MEMORY_HOST)
    Throw(HVD_ERR_UNSUPPORTED, std::string("mpi ") + what + ": only host memory");
  return *b;
}
int Int(size_t v, const char* what) {
  if (v > static_cast<size_t>(INT_MAX))
    Throw(HVD_ERR_UNSUPPORTED, std::string("mpi ") + what + ": a count or offset exceeds INT_MAX");
  return static_cast<int>(v);
}

int Allreduce(void* comm, const hvd_transport_buffer_t* buf, size_t count, hvd_dtype_t dtype,
              hvd_reduce_op_t op) noexcept {
  return Guard(comm, [&](Comm& c) {
    MPI_Datatype t;
    MPI_Op o;
    const size_t es = MpiTypeOp(dtype, op, &t, &o);
    const hvd_transport_buffer_t& b = Host(buf, "allreduce");
    if (b.bytes < count * es)
      Throw(HVD_ERR_INVALID_ARGUMENT, "mpi allreduce: buffer smaller than count");
    const size_t step = kChunk / 8;  // elements per call
    for (size_t off = 0; off < count; off += step) {
      void* p = static_cast<char*>(b.data) + off * es;
      const int n = static_cast<int>(std::min(step, count - off));
      Coll(c, "MPI_Iallreduce",
           [&](MPI_Request* r) { return MPI_Iallreduce(MPI_IN_PLACE, p, n, t, o, c.comm, r); });
    }
    return HVD_OK;
  });
}

int Reducescatter(void* comm, const hvd_transport_buffer_t* buf, const size_t* counts,
                  hvd_dtype_t dtype, hvd_reduce_op_t op) noexcept {
  return Guard(comm, [&](Comm& c) {
    MPI_Datatype t;
    MPI_Op o;
    const size_t es = MpiTypeOp(dtype, op, &t, &o);
    const hvd_transport_buffer_t& b = Host(buf, "reducescatter");
    if (counts == nullptr) Throw(HVD_ERR_INVALID_ARGUMENT, "mpi reducescatter: NULL counts");
    std::vector<int> n(static_cast<size_t>(c.size));
    size_t total = 0, mine = 0;
    for (int r = 0; r < c.size; ++r) {
      if (r == c.rank) mine = total;
      n[r] = Int(counts[r], "reducescatter");
      total += counts[r];
    }
    if (b.bytes < total * es)
      Throw(HVD_ERR_INVALID_ARGUMENT, "mpi reducescatter: buffer smaller than the counts");
    Coll(c, "MPI_Ireduce_scatter", [&](MPI_Request* r) {
      return MPI_Ireduce_scatter(MPI_IN_PLACE, b.data, n.data(), t, o, c.comm, r);
    });
    // MPI leaves this rank's block at the front; the contract wants it in place.
    if (mine > 0 && counts[c.rank] > 0)
      std::memmove(static_cast<char*>(b.data) + mine * es, b.data, counts[c.rank] * es);
    return HVD_OK;
  });
}

void Displacements(const Comm& c, const size_t* bytes, const char* what, std::vector<int>* n,
                   std::vector<int>* d, size_t* total) {
  n->resize(static_cast<size_t>(c.size));
  d->resize(static_cast<size_t>(c.size));
  *total = 0;
  for (int r = 0; r < c.size; ++r) {
    (*n)[r] = Int(bytes[r], what);
    (*d)[r] = Int(*total, what);
    *total += bytes[r];
  }
}

int Allgatherv(void* comm, const hvd_transport_buffer_t* send, const hvd_transport_buffer_t* recv,
               const size_t* recv_bytes) noexcept {
  return Guard(comm, [&](Comm& c) {
    if (recv_bytes == nullptr) Throw(HVD_ERR_INVALID_ARGUMENT, "mpi allgatherv: NULL counts");
    std::vector<int> n, d;
    size_t total = 0;
    Displacements(c, recv_bytes, "allgatherv", &n, &d, &total);
    const hvd_transport_buffer_t& s = Host(send, "allgatherv");
    const hvd_transport_buffer_t& rv = Host(recv, "allgatherv");
    if (rv.bytes < total || s.bytes < recv_bytes[c.rank])
      Throw(HVD_ERR_INVALID_ARGUMENT, "mpi allgatherv: buffer too small");
    char* own = static_cast<char*>(rv.data) + d[c.rank];
    if (recv_bytes[c.rank] > 0 && own != s.data)
      std::memmove(own, s.data, recv_bytes[c.rank]);  // in place: no aliasing
    Coll(c, "MPI_Iallgatherv", [&](MPI_Request* r) {
      return MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_BYTE, rv.data, n.data(), d.data(), MPI_BYTE,
                             c.comm, r);
    });
    return HVD_OK;
  });
}

int Broadcast(void* comm, const hvd_transport_buffer_t* buf, int32_t root) noexcept {
  return Guard(comm, [&](Comm& c) {
    const hvd_transport_buffer_t& b = Host(buf, "broadcast");
    if (root < 0 || root >= c.size)
      Throw(HVD_ERR_INVALID_ARGUMENT, "mpi broadcast: bad root " + std::to_string(root));
    for (size_t off = 0; off < b.bytes; off += kChunk) {
      const int n = static_cast<int>(std::min(kChunk, b.bytes - off));
      Coll(c, "MPI_Ibcast", [&](MPI_Request* r) {
        return MPI_Ibcast(static_cast<char*>(b.data) + off, n, MPI_BYTE, root, c.comm, r);
      });
    }
    return HVD_OK;
  });
}

int Alltoallv(void* comm, const hvd_transport_buffer_t* send, const size_t* send_bytes,
              const hvd_transport_buffer_t* recv, const size_t* recv_bytes) noexcept {
  return Guard(comm, [&](Comm& c) {
    if (send_bytes == nullptr || recv_bytes == nullptr)
      Throw(HVD_ERR_INVALID_ARGUMENT, "mpi alltoallv: NULL counts");
    std::vector<int> sn, sd, rn, rd;
    size_t stotal = 0, rtotal = 0;
    Displacements(c, send_bytes, "alltoallv", &sn, &sd, &stotal);
    Displacements(c, recv_bytes, "alltoallv", &rn, &rd, &rtotal);
    const hvd_transport_buffer_t& s = Host(send, "alltoallv");
    const hvd_transport_buffer_t& rv = Host(recv, "alltoallv");
    if (s.bytes < stotal || rv.bytes < rtotal)
      Throw(HVD_ERR_INVALID_ARGUMENT, "mpi alltoallv: buffer too small");
    const char* sp = static_cast<const char*>(s.data);
    const char* rp = static_cast<const char*>(rv.data);
    std::vector<char> copy;  // MPI forbids overlapping send and receive buffers
    if (stotal > 0 && rtotal > 0 && sp < rp + rtotal && rp < sp + stotal) {
      copy.assign(sp, sp + stotal);
      sp = copy.data();
    }
    Coll(c, "MPI_Ialltoallv", [&](MPI_Request* r) {
      return MPI_Ialltoallv(sp, sn.data(), sd.data(), MPI_BYTE, rv.data, rn.data(), rd.data(),
                            MPI_BYTE, c.comm, r);
    });
    return HVD_OK;
  });
}

int Barrier(void* comm) noexcept {
  return Guard(comm, [&](Comm& c) {
    Coll(c, "MPI_Ibarrier", [&](MPI_Request* r) { return MPI_Ibarrier(c.comm, r); });
    return HVD_OK;
  });
}

}  // namespace hvd_mpi_transport
