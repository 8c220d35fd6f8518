/*
 * Compiled, not run: user code initialising structs with HVD_PARAMS_INIT and
 * HVD_TENSOR_INIT must build warning-free under -Wall -Wextra -Werror (as C99
 * and as C++); a partial brace initializer trips -Wmissing-field-initializers.
 */
#include "hvd.h"

int hvd_init_macros_touch(void);

int hvd_init_macros_touch(void) {
    hvd_params_t p = HVD_PARAMS_INIT;
    hvd_tensor_t t = HVD_TENSOR_INIT;
    return (int)p.struct_size + t.ndim;
}
