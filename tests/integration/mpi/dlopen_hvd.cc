// Loads libhvd.so with dlopen (as a binding would; the program links neither
// hvd nor MPI) and creates a context with the MPI transport, outside mpirun.
//   dlopen_hvd LIBHVD missing   the plugin cannot be found: expect
//                               HVD_ERR_NOT_FOUND naming the plugin file
//   dlopen_hvd LIBHVD present   the plugin is there: a world of one over MPI,
//                               which hvd initialises and finalises; a second
//                               context then fails clearly (MPI cannot be
//                               initialised twice in a process)
#include <dlfcn.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "hvd.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s LIBHVD missing|present\n", argv[0]);
    return 2;
  }
  const bool expect_missing = std::strcmp(argv[2], "missing") == 0;
  void* dl = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (dl == nullptr) {
    std::fprintf(stderr, "FAILED: dlopen(%s): %s\n", argv[1], dlerror());
    return 1;
  }
  auto create = reinterpret_cast<hvd_status_t (*)(const hvd_params_t*, hvd_context_t*)>(
      dlsym(dl, "hvd_context_create"));
  auto destroy = reinterpret_cast<hvd_status_t (*)(hvd_context_t)>(dlsym(dl, "hvd_context_destroy"));
  auto last_error = reinterpret_cast<const char* (*)(void)>(dlsym(dl, "hvd_last_error"));
  auto status_string = reinterpret_cast<const char* (*)(hvd_status_t)>(dlsym(dl, "hvd_status_string"));
  auto transport_of = reinterpret_cast<hvd_status_t (*)(hvd_context_t, const char**)>(
      dlsym(dl, "hvd_context_transport"));
  auto size_of = reinterpret_cast<hvd_status_t (*)(hvd_context_t, int*)>(dlsym(dl, "hvd_context_size"));
  if (!create || !destroy || !last_error || !status_string || !transport_of || !size_of) {
    std::fprintf(stderr, "FAILED: libhvd lacks a C API symbol\n");
    return 1;
  }
  hvd_params_t params = HVD_PARAMS_INIT;
  params.transport = "mpi";
  params.mask |= HVD_PARAM_TRANSPORT;
  hvd_context_t ctx = nullptr;
  hvd_status_t s = create(&params, &ctx);
  const std::string err = last_error();
  std::printf("hvd_context_create(transport=mpi) -> %s: %s\n", status_string(s), err.c_str());
  int failures = 0;
  if (expect_missing) {
    if (s != HVD_ERR_NOT_FOUND) {
      std::fprintf(stderr, "FAILED: want HVD_ERR_NOT_FOUND\n");
      ++failures;
    }
    if (err.find("libhvd_transport_mpi.so") == std::string::npos || err.find("HVD_TRANSPORT_PATH") == std::string::npos) {
      std::fprintf(stderr, "FAILED: the message should name the plugin and HVD_TRANSPORT_PATH\n");
      ++failures;
    }
    if (s == HVD_OK) destroy(ctx);
  } else {
    if (s != HVD_OK) {
      std::fprintf(stderr, "FAILED: want HVD_OK\n");
      return 1;
    }
    const char* name = nullptr;
    int size = -1;
    transport_of(ctx, &name);
    size_of(ctx, &size);
    if (name == nullptr || std::strcmp(name, "mpi") != 0 || size != 1) {
      std::fprintf(stderr, "FAILED: transport %s, size %d; want mpi, 1\n", name ? name : "(null)", size);
      ++failures;
    }
    if (destroy(ctx) != HVD_OK) ++failures;
    // hvd initialised MPI and finalised it with its last context: MPI cannot
    // be initialised again in this process, and hvd says so.
    s = create(&params, &ctx);
    const std::string again = last_error();
    std::printf("second hvd_context_create(transport=mpi) -> %s: %s\n", status_string(s), again.c_str());
    if (s != HVD_ERR_UNSUPPORTED || again.find("cannot be initialised twice") == std::string::npos) {
      std::fprintf(stderr, "FAILED: want HVD_ERR_UNSUPPORTED saying MPI cannot be initialised twice\n");
      ++failures;
    }
    if (s == HVD_OK) destroy(ctx);
  }
  std::printf("%s\n", failures == 0 ? "PASS" : "FAIL");
  return failures == 0 ? 0 : 1;
}
