/* For the checkpoint fuzz targets: read the first and last byte of every tensor a parser accepted,
 * so AddressSanitizer sees any range that runs outside the buffer. */
#ifndef KVCHAT_FUZZ_TOUCH_H
#define KVCHAT_FUZZ_TOUCH_H

#include "../../model/safetensors.h"

static void touch_tensors(const st_file *f)
{
    for (int i = 0; i < f->n_tensors; i++)
        if (f->tensors[i].end > f->tensors[i].begin) {
            volatile uint8_t first = ((const uint8_t *)f->tensors[i].data)[0];
            volatile uint8_t last =
                ((const uint8_t *)f->tensors[i].data)[f->tensors[i].end - f->tensors[i].begin - 1];
            (void)first;
            (void)last;
        }
}

#endif
