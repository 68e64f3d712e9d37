/* libFuzzer target: any byte string as a whole safetensors file. The parser must accept or reject
 * it with an error, never crash, hang or read outside the buffer. */
#include <stddef.h>
#include <stdint.h>

#include "../../model/safetensors.h"
#include "touch.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    st_file f;
    if (st_parse(&f, data, size) == 0) {
        touch_tensors(&f);
        st_close(&f);
    }
    return 0;
}
