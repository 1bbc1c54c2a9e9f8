#ifndef FLOTILLA_DP_H
#define FLOTILLA_DP_H

/* Flotilla differential privacy: clipping, exact discrete noise, central and distributed
 * DP, the RDP accountant and budget checks. Pure library: no I/O, no clocks, no globals. */

#include <stddef.h>
#include <stdint.h>

#include "flotilla/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ==== mechanisms: clipping, samplers, central and distributed DP (dp-mechanisms) ==== */

/* ==== end mechanisms ==== */

/* ==== accounting: RDP accountant, conversion, budget (dp-accountant) ==== */

/* ==== end accounting ==== */

#ifdef __cplusplus
}
#endif

#endif /* FLOTILLA_DP_H */
