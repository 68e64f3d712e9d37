/* libFuzzer target: any byte string as a pickle (the restricted reader alone, its allowlist the
 * checkpoint reader's) and as a whole pytorch_model.bin, zip or legacy. Both must accept or reject
 * it with an error, never crash, hang, run anything or read outside the buffer. */
#include <stddef.h>
#include <stdint.h>

#include "../../model/pickle.h"
#include "../../model/pytorch.h"
#include "touch.h"

static const char *const ALLOWED[] = {"collections.OrderedDict", "torch._utils._rebuild_tensor_v2",
                                      "torch.FloatStorage", NULL};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    pk_arena *a;
    const pk_value *root;
    size_t used;
    if (pk_load(&a, data, size, &used, ALLOWED, &root) == 0)
        pk_free(a);
    st_file f;
    if (pt_parse(&f, data, size) == 0) {
        touch_tensors(&f);
        st_close(&f);
    }
    return 0;
}
