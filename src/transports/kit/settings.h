// What every plugin's set-up reads from the env alike (Settings), read once
// here; a plugin's ReadEnv (plugin.cc) checks the env's size, calls
// ReadSettings and reads what is its own.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "hvd.h"
#include "errors.h"
#include "peers.h"
#include "store.h"

namespace hvd::kit {

struct Settings {
  int rank = 0;
  int size = 1;
  int local_size = 0;
  double timeout_s = 0;  // the transfer limit
  double start_s = 30;   // the start timeout (30 s where the env gives none)
  void* logger = nullptr;
  void (*log)(void*, int, const char*) = nullptr;
  StoreCalls store;
  std::vector<std::string> hosts;  // every rank's host name (env.hosts; "" = unknown)
};

// Copies the caller's env (of in->struct_size bytes, at least `least`) into
// *out, the fields it lacks zero: HVD_ERR_INVALID_ARGUMENT with "<name> init:
// missing or too small environment table" if it is NULL or smaller.
template <typename Env>
int CopyEnv(const Env* in, size_t least, const char* name, Env* out, std::string* msg) {
  if (in == nullptr || in->struct_size < least) {
    *msg = std::string(name) + " init: missing or too small environment table";
    return HVD_ERR_INVALID_ARGUMENT;
  }
  *out = Env{};
  std::memcpy(out, in, std::min(in->struct_size, sizeof(Env)));
  return HVD_OK;
}

// Reads the env's world (rank, size, local size), limits, logger and store
// into *s: HVD_ERR_INVALID_ARGUMENT with "<name> init: ..." in *msg for a bad
// rank, or no store where there are peers.
template <typename Env>
int ReadSettings(const Env& env, const char* name, Settings* s, std::string* msg) {
  if (env.size < 1 || env.rank < 0 || env.rank >= env.size) {
    *msg = std::string(name) + " init: bad rank " + std::to_string(env.rank) + " of size " +
           std::to_string(env.size);
    return HVD_ERR_INVALID_ARGUMENT;
  }
  s->store = {env.kv, env.kv_set, env.kv_get, env.kv_free};
  if (env.size > 1 && !s->store.Usable()) {
    *msg = std::string(name) + " init: no rendezvous store callbacks";
    return HVD_ERR_INVALID_ARGUMENT;
  }
  s->rank = env.rank;
  s->size = env.size;
  s->local_size = env.local_size;
  s->timeout_s = env.timeout_s;
  s->start_s = env.start_timeout_s > 0 ? env.start_timeout_s : 30.0;
  s->logger = env.logger;
  s->log = env.log;
  s->hosts = HostNames(env);
  return HVD_OK;
}

// The end of a failed init: the message to the logger (if any) and into
// init's error buffer; returns status.
inline int InitFailed(void (*log)(void*, int, const char*), void* logger, char* err,
                      size_t err_len, const std::string& msg, int status) {
  try {
    if (log != nullptr) log(logger, HVD_LOG_ERROR, msg.c_str());
  } catch (...) {
  }
  WriteErr(err, err_len, msg);
  return status;
}

// init's frame for a plugin that builds its communicator in C++: the NULL
// check, the exception wall, and a failure logged and written to `err`.
// start(comm, &msg) builds the communicator into *comm and returns a
// status; an exception is turned into one: StoreError (a store call failed)
// HVD_ERR_RENDEZVOUS, another std::exception by describe(e, &msg), anything
// else HVD_ERR_TRANSPORT. Messages start with "<name> init: ".
template <typename Env, typename Start, typename Describe>
int InitFrame(const char* name, const Env* env, void** comm, char* err, size_t err_len,
              Start&& start, Describe&& describe) noexcept {
  const std::string prefix = std::string(name) + " init: ";
  if (comm == nullptr) {
    WriteErr(err, err_len, prefix + "comm is NULL");
    return HVD_ERR_INVALID_ARGUMENT;
  }
  *comm = nullptr;
  std::string msg;
  int status = HVD_ERR_INTERNAL;
  try {
    status = start(comm, &msg);
    if (status == HVD_OK) return HVD_OK;
  } catch (const StoreError& e) {
    msg = prefix + e.what();
    status = HVD_ERR_RENDEZVOUS;
  } catch (const std::exception& e) {
    status = describe(e, &msg);
  } catch (...) {
    msg = prefix + "unknown exception";
    status = HVD_ERR_TRANSPORT;
  }
  return InitFailed(env != nullptr ? env->log : nullptr, env != nullptr ? env->logger : nullptr,
                    err, err_len, msg, status);
}

}  // namespace hvd::kit
