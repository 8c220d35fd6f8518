/*
 * Loads libhvd.so with dlopen (path in argv[1]) and drives it through dlsym
 * only: this program is not linked against hvd, so the library must load on
 * its own (no transport library needed) and export the C API by name, and
 * nothing else of the C++ core.
 */
#include <dlfcn.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "capi_test_util.h"
#include "hvd.h" /* types and constants only; no function is called directly */

typedef hvd_status_t (*version_fn)(int *, int *, int *);
typedef hvd_status_t (*init_fn)(const hvd_params_t *);
typedef hvd_status_t (*shutdown_fn)(void);
typedef hvd_status_t (*int_getter_fn)(int *);
typedef hvd_status_t (*allreduce_fn)(hvd_context_t, const char *, const hvd_tensor_t *, void *,
                                     hvd_reduce_op_t);
typedef const char *(*text_fn)(void);
typedef const char *(*status_string_fn)(hvd_status_t);

static const char *g_path;
static void *g_lib;

/* dlsym returns void*; C99 has no direct conversion to a function pointer,
 * so copy the bits (the POSIX-sanctioned way). */
#define LOOKUP(type, var, name)                                    \
    type var;                                                      \
    do {                                                           \
        void *sym_ = dlsym(g_lib, name);                           \
        if (sym_ == NULL) fail_msg("dlsym(%s): %s", name, dlerror()); \
        memcpy(&var, &sym_, sizeof(var));                          \
    } while (0)

static int open_lib(void **state) {
    (void)state;
    g_lib = dlopen(g_path, RTLD_NOW | RTLD_LOCAL);
    if (g_lib == NULL) {
        fprintf(stderr, "dlopen(%s): %s\n", g_path, dlerror());
        return -1;
    }
    return 0;
}

static int close_lib(void **state) {
    (void)state;
    if (g_lib != NULL) dlclose(g_lib);
    g_lib = NULL;
    return 0;
}

static void test_version_by_name(void **state) {
    int major = -1, minor = -1, patch = -1;
    LOOKUP(version_fn, version, "hvd_version");
    (void)state;
    assert_int_equal(version(&major, &minor, &patch), HVD_OK);
    assert_int_equal(major, HVD_VERSION_MAJOR);
    assert_int_equal(minor, HVD_VERSION_MINOR);
    assert_int_equal(patch, HVD_VERSION_PATCH);
    assert_int_equal(version(NULL, NULL, NULL), HVD_OK);
}

static void test_init_allreduce_shutdown(void **state) {
    LOOKUP(init_fn, init, "hvd_init");
    LOOKUP(shutdown_fn, shutdown, "hvd_shutdown");
    LOOKUP(int_getter_fn, rank, "hvd_rank");
    LOOKUP(int_getter_fn, size, "hvd_size");
    LOOKUP(allreduce_fn, allreduce, "hvd_allreduce");
    LOOKUP(text_fn, last_error, "hvd_last_error");
    float x[3] = {1.5f, -2.0f, 4.0f}, y[3] = {0, 0, 0};
    int64_t shape[1] = {3};
    hvd_tensor_t t = HVD_TENSOR_INIT;
    int v = -1;
    hvd_status_t st;
    (void)state;
    t.data = x;
    t.dtype = HVD_FLOAT32;
    t.ndim = 1;
    t.shape = shape;
    assert_int_equal(allreduce(NULL, "x", &t, y, HVD_SUM), HVD_ERR_NOT_INITIALIZED);
    assert_string_not_equal(last_error(), "");
    st = init(NULL);
    if (st != HVD_OK) fail_msg("hvd_init: %d (%s)", (int)st, last_error());
    assert_int_equal(rank(&v), HVD_OK);
    assert_int_equal(v, 0);
    assert_int_equal(size(&v), HVD_OK);
    assert_int_equal(v, 1);
    st = allreduce(NULL, "x", &t, y, HVD_SUM);
    if (st != HVD_OK) fail_msg("hvd_allreduce: %d (%s)", (int)st, last_error());
    assert_true(y[0] == 1.5f && y[1] == -2.0f && y[2] == 4.0f);
    st = allreduce(NULL, "x", &t, x, HVD_MAX);
    assert_int_equal(st, HVD_OK);
    assert_true(x[0] == 1.5f && x[1] == -2.0f && x[2] == 4.0f);
    assert_int_equal(shutdown(), HVD_OK);
    assert_int_equal(shutdown(), HVD_ERR_NOT_INITIALIZED);
}

static void test_status_string_by_name(void **state) {
    LOOKUP(status_string_fn, status_string, "hvd_status_string");
    (void)state;
    assert_string_equal(status_string((hvd_status_t)-999), "unknown status");
    assert_string_not_equal(status_string(HVD_ERR_MISMATCH), "unknown status");
}

/* The C++ core stays hidden. */
static void test_internals_hidden(void **state) {
    (void)state;
    assert_null(dlsym(g_lib, "_ZN3hvd7Context6CreateEPK10hvd_params"));
    assert_null(dlsym(g_lib, "_ZN3hvd10ReduceIntoEPvPKvm9hvd_dtype13hvd_reduce_op"));
    assert_null(dlsym(g_lib, "hvd_reduce_kernel"));
}

int main(int argc, char **argv) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_version_by_name),
        cmocka_unit_test(test_status_string_by_name),
        cmocka_unit_test(test_init_allreduce_shutdown),
        cmocka_unit_test(test_internals_hidden),
    };
    if (argc < 2) {
        fprintf(stderr, "usage: %s /path/to/libhvd.so\n", argv[0]);
        return 2;
    }
    g_path = argv[1];
    capi_clear_launcher_env();
    return cmocka_run_group_tests_name("capi.dlopen", tests, open_lib, close_lib) == 0 ? 0 : 1;
}
