/* One distributed-DP round in memory: three clients encode their updates, the "secure
 * aggregation" here is a plain sum modulo 2^b, and the server decodes the noisy sum and
 * reports what the accountant needs. */
#include <stdio.h>
#include <string.h>

#include "flotilla/dp.h"

#define DIM 10
#define CLIENTS 3

int main(void) {
    fl_dp_distributed_params p;
    fl_dp_distributed_params_init(&p);
    p.dim = DIM;
    p.clip = 1.0;        /* L2 clip, model units */
    p.modulus_bits = 20; /* secure-aggregation field Z_{2^20} */
    p.n_min = 2;         /* noise stays sufficient if one client drops out */
    /* Total noise std = 1.0 * clip; wrap-around probability <= 1e-9. */
    if (fl_dp_distributed_choose(&p, 1.0, CLIENTS, 1e-9) != FL_OK)
        return 1;

    uint8_t rotation_seed[FL_DP_SEED_BYTES]; /* public, shared by the round */
    memset(rotation_seed, 7, sizeof(rotation_seed));
    size_t dpad = fl_dp_distributed_padded_dim(DIM);
    uint64_t enc[16], sum[16] = {0};
    const uint64_t mask = ((uint64_t)1 << p.modulus_bits) - 1;

    for (int c = 0; c < CLIENTS; c++) {
        fl_dp_rng *rng = NULL; /* each client's private randomness */
        if (fl_dp_rng_create_os(&rng, NULL) != FL_OK)
            return 1;
        float update[DIM];
        for (int i = 0; i < DIM; i++)
            update[i] = 0.1f * (float)(c + 1) * (float)(i % 3);
        double norm;
        fl_status st =
            fl_dp_distributed_encode(rng, enc, dpad, update, &p, rotation_seed, &norm, NULL);
        if (st != FL_OK) {
            fprintf(stderr, "encode: %s\n", fl_dp_rng_errmsg(rng));
            fl_dp_rng_destroy(rng);
            return 1;
        }
        fl_dp_rng_destroy(rng);
        for (size_t i = 0; i < dpad; i++)
            sum[i] = (sum[i] + enc[i]) & mask; /* what secure aggregation computes */
    }

    float noisy_sum[DIM];
    if (fl_dp_distributed_decode(noisy_sum, sum, dpad, &p, rotation_seed, NULL) != FL_OK)
        return 1;
    fl_dp_distributed_info info;
    if (fl_dp_distributed_info_get(&info, &p, CLIENTS) != FL_OK)
        return 1;
    printf("decoded %d coordinates, e.g. %.3f\n", DIM, noisy_sum[1]);
    printf("accountant: sigma_c^2 = %llu/%llu, l2 = %.1f, l1 = %.1f, d' = %zu, rho = %.3f\n",
           (unsigned long long)p.sigma2_num, (unsigned long long)p.sigma2_den, info.l2_bound,
           info.l1_bound, info.dim_padded, info.rho);
    printf("distributed round ok\n");
    return 0;
}
