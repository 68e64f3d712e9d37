/* Whether two samples come from one distribution: the chi-square test of their counts, for the
 * tests of a sampling rule (speculative decoding's against plain decoding's). */
#ifndef KVCHAT_CHI_SQUARE_H
#define KVCHAT_CHI_SQUARE_H

/* the p-value of counts a and b over V cells coming from one distribution (1 with fewer than two
 * cells seen) */
double chi_square_p(const int *a, const int *b, int V);

#endif
