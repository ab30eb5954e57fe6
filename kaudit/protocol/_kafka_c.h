/* C helpers of kaudit's compiled core (kaudit/protocol/_cbatch.pyx): big-endian reads and
 * CRC-32C (Castagnoli). The CRC uses the SSE4.2 instruction where the CPU has it (checked at
 * run time) and a slicing-by-8 table otherwise; the result is the crc32c package's. */
#ifndef KAUDIT_KAFKA_C_H
#define KAUDIT_KAFKA_C_H
#include <stdint.h>
#include <stddef.h>
#include <string.h>

static inline int64_t kd_i64(const uint8_t *p) {
    uint64_t v = 0; for (int i = 0; i < 8; i++) v = (v << 8) | p[i]; return (int64_t)v;
}
static inline int32_t kd_i32(const uint8_t *p) {
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3]);
}
static inline uint32_t kd_u32(const uint8_t *p) { return (uint32_t)kd_i32(p); }
static inline int16_t kd_i16(const uint8_t *p) { return (int16_t)(((uint16_t)p[0] << 8) | p[1]); }

static uint32_t kd_table[8][256];
static int kd_hw = -1;

static void kd_crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1)));
        kd_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            kd_table[t][i] = (kd_table[t - 1][i] >> 8) ^ kd_table[0][kd_table[t - 1][i] & 0xFF];
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    kd_hw = __builtin_cpu_supports("sse4.2") ? 1 : 0;
#else
    kd_hw = 0;
#endif
}

static uint32_t kd_crc_sw(uint32_t crc, const uint8_t *p, size_t n) {
    uint32_t c = ~crc;
    while (n >= 8) {
        uint32_t lo = c ^ ((uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24));
        c = kd_table[7][lo & 0xFF] ^ kd_table[6][(lo >> 8) & 0xFF] ^ kd_table[5][(lo >> 16) & 0xFF]
            ^ kd_table[4][lo >> 24] ^ kd_table[3][p[4]] ^ kd_table[2][p[5]] ^ kd_table[1][p[6]]
            ^ kd_table[0][p[7]];
        p += 8; n -= 8;
    }
    while (n--) c = (c >> 8) ^ kd_table[0][(c ^ *p++) & 0xFF];
    return ~c;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <nmmintrin.h>
__attribute__((target("sse4.2")))
static uint32_t kd_crc_hw(uint32_t crc, const uint8_t *p, size_t n) {
    uint64_t c = ~crc;
    while (n >= 8) { uint64_t w; memcpy(&w, p, 8); c = _mm_crc32_u64(c, w); p += 8; n -= 8; }
    while (n--) c = _mm_crc32_u8((uint32_t)c, *p++);
    return ~(uint32_t)c;
}
#else
static uint32_t kd_crc_hw(uint32_t crc, const uint8_t *p, size_t n) { return kd_crc_sw(crc, p, n); }
#endif

static inline uint32_t kd_crc32c(const uint8_t *p, size_t n) {
    if (kd_hw < 0) kd_crc_init();
    return kd_hw ? kd_crc_hw(0, p, n) : kd_crc_sw(0, p, n);
}
#endif
