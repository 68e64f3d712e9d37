/* libFuzzer target: any byte string as a whole safetensors file. The parser must accept or reject it
 * with an error, never crash, hang or read outside the buffer. */
#include <stddef.h>
#include <stdint.h>

#include "../../model/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    st_file f;
    if (st_parse(&f, data, size) == 0) {
        for (int i = 0; i < f.n_tensors; i++) /* touch every claimed byte range */
            if (f.tensors[i].end > f.tensors[i].begin) {
                volatile uint8_t first = ((const uint8_t *)f.tensors[i].data)[0];
                volatile uint8_t last = ((const uint8_t *)f.tensors[i].data)[f.tensors[i].end - f.tensors[i].begin - 1];
                (void)first;
                (void)last;
            }
        st_close(&f);
    }
    return 0;
}
