/* The chi-square test of two samples' counts (chi_square.h). */
#include "chi_square.h"

#include <math.h>

/* the regularised upper incomplete gamma Q(a, x): the chi-square's p-value is Q(df / 2, x / 2) */
static double gamma_q(double a, double x)
{
    if (x <= 0)
        return 1;
    double lg = lgamma(a);
    if (x < a + 1) { /* the series of P */
        double term = 1 / a, sum = term;
        for (int n = 1; n < 500; n++) {
            term *= x / (a + n);
            sum += term;
        }
        return 1 - sum * exp(-x + a * log(x) - lg);
    }
    double b = x + 1 - a, c = 1e300, d = 1 / b, h = d; /* Lentz's continued fraction of Q */
    for (int i = 1; i < 500; i++) {
        double an = -i * (i - a);
        b += 2;
        d = an * d + b;
        d = fabs(d) < 1e-300 ? 1e-300 : d;
        c = b + an / c;
        c = fabs(c) < 1e-300 ? 1e-300 : c;
        d = 1 / d;
        h *= d * c;
    }
    return exp(-x + a * log(x) - lg) * h;
}

/* the p-value of two samples' counts over V ids coming from one distribution */
double chi_square_p(const int *a, const int *b, int V)
{
    double x = 0;
    int cells = 0;
    for (int i = 0; i < V; i++)
        if (a[i] + b[i]) {
            x += (double)(a[i] - b[i]) * (a[i] - b[i]) / (a[i] + b[i]);
            cells++;
        }
    return cells < 2 ? 1 : gamma_q((cells - 1) / 2.0, x / 2);
}
