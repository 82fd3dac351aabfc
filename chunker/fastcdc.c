/*
 * fastcdc.c — FastCDC content-defined chunking (Xia et al., USENIX ATC 2016):
 * a gear rolling hash (hash = (hash << 1) + gear[byte]), cut-point skipping
 * (no test before min bytes) and normalized chunking (a stricter mask before
 * the average size, a looser one after it), which narrows the chunk-size
 * distribution around avg.
 *
 * The gear table and the masks are part of the image format: changing either
 * changes every cut point and every chunk name (tests/unit/test_fastcdc.c
 * holds golden names that catch it).
 */
#include <errno.h>

#include "chunker/chunker.h"

/* splitmix64 from the seed 0x6c617a79726f6f74 ("lazyroot"). */
const uint64_t fastcdc_gear[256] = {
	0xe893237403e81d5bULL, 0x216e5b20fdfc1882ULL, 0x71cd1c13d8accb91ULL,
	0x0bb17db4675b073eULL, 0x576a1f8772bbfe98ULL, 0x9870f26faa06c90eULL,
	0x4ba8c9dc8a3fd7a3ULL, 0xd37802f82b8291baULL, 0xf3bb1972c4317865ULL,
	0x6c23060f03acfd48ULL, 0xd9bb4671685b28e2ULL, 0xb96ba8cf6f9e9548ULL,
	0x82698da097fb3a07ULL, 0x3ccbafa005e61acfULL, 0x6816ad818e380177ULL,
	0xf67519a042e2d472ULL, 0x1e26a5aecf2f99ddULL, 0x3ce4f2a84b1ede61ULL,
	0x8918e8cf19225835ULL, 0x1b382cd1930ebd14ULL, 0xc8d409739e54b985ULL,
	0x23a9f5a789eddc86ULL, 0x628e1ab3dc31a981ULL, 0x7af244576c00dfecULL,
	0x52cc5ff8cab82cf2ULL, 0x19e3175aff70621bULL, 0x9d3cfb90b688e81dULL,
	0x0d413cb9cc01b257ULL, 0xb739300d62a71fa2ULL, 0xfdd8e024e2b4b253ULL,
	0xc0e678e91eaf33d8ULL, 0x822a0190e1147e20ULL, 0xfbe4e669feccc54aULL,
	0xbcc2b5fa823de300ULL, 0x28d200ec8346a1e4ULL, 0x6bfb630501f135a7ULL,
	0x5848314a39e77e68ULL, 0x09883a3c675851a5ULL, 0x6b611afb2d8dc17aULL,
	0x8437bdaee72f5ec5ULL, 0xf22f2f880ad51c49ULL, 0xe63afeff80c65870ULL,
	0xd4c7368fda5ecb5eULL, 0xcdf68d9fa9ff3f48ULL, 0xc2db54d135499690ULL,
	0x4f51f525b6daa4a4ULL, 0x3939359973e1d6acULL, 0x7f68ff959176d956ULL,
	0x3a99a3bd160802b6ULL, 0xd93ff9a8c607520bULL, 0x0cc16f767f845f00ULL,
	0x3c4a827757ec3e92ULL, 0x1a657c87298d0110ULL, 0xdbd9e4c139606733ULL,
	0x5f7b61c3390e6db6ULL, 0x6a5cd288a33b57ffULL, 0x797b91e969d7ba49ULL,
	0xf81ebcf9f99d08aaULL, 0x94e7f14575ab7628ULL, 0x53ba008edc1d8953ULL,
	0x16c3bce96c930689ULL, 0x0cfa338e83aba702ULL, 0xbc62368739d27d2bULL,
	0x819f7de21a9b55c8ULL, 0x8007fa3925312438ULL, 0x532e4cc7578afa12ULL,
	0x49c2a07620235d24ULL, 0x088a490793815b30ULL, 0x39128d455babb309ULL,
	0xb46c1a8def2ff975ULL, 0x3389c4eaf7edcb5dULL, 0xf27ed67fe4117538ULL,
	0x751bf7bc43732862ULL, 0xe3779391a1cdf32eULL, 0x190b5c2b6e94b6dbULL,
	0xff42066288d2b07eULL, 0xb88145bcc0a7b86eULL, 0x6c77734635df4b92ULL,
	0x95762caffe9b6912ULL, 0x6a857cd626bab147ULL, 0xfe8402e962cf9b8aULL,
	0x79b777db22744a8eULL, 0x187dd1e1e604d0b5ULL, 0xfda6b4f4beffb0bcULL,
	0x438e6a66b8479871ULL, 0x0f78a12165d4b327ULL, 0xb4c8e548ae7e3231ULL,
	0xa9d95b593e60d403ULL, 0xdf2f490541d3b9adULL, 0x741fda0829accf97ULL,
	0x6baee21ba0888b78ULL, 0x8096c1da3befc9a4ULL, 0x9b5746289bb519f5ULL,
	0xbd60efe24e6c2997ULL, 0xe8fc12809eae6c96ULL, 0x488ecc2321c2ea34ULL,
	0x39e838f48edb77adULL, 0x964c080c221cbc08ULL, 0x95230e886fbee28aULL,
	0x9b6c617692a03b72ULL, 0xb23a9c6aaecd9db7ULL, 0xe89a1a81d07d22c3ULL,
	0xd4f9b77b999d2028ULL, 0xb949dd2bd283431aULL, 0xf9468bd6eabd8ccfULL,
	0x5a193ae1f431442eULL, 0xdb79f56724f60729ULL, 0x0e77b08c2d1a726bULL,
	0x0b0cd6ed5aaf9648ULL, 0xd0a76c087a33e3b8ULL, 0x5d8b03eb5dc6cf15ULL,
	0x66b33726c6364dcdULL, 0x32d59ee600383ce5ULL, 0x322002b2c1a0a1c2ULL,
	0x60fb4bc1d4c9cb91ULL, 0x22229b62771ac8e8ULL, 0x368fd46124f00288ULL,
	0x74c78c5fdc76598bULL, 0x4af580a70f94d54dULL, 0x44bb6b239bc52468ULL,
	0x769e506ce1bee218ULL, 0xa3fb22c83cfee9f4ULL, 0xa74aa5e72cdd2492ULL,
	0xac5143066c2bcc73ULL, 0xb1653d6c6ca8d8caULL, 0xe208d08d9287070eULL,
	0xf8508b8e14145d2fULL, 0x064b9f8403a92751ULL, 0xa8e7d45fdf24321cULL,
	0x66857b99aa944a79ULL, 0xc3a56f38bdd95224ULL, 0xd456168da1035204ULL,
	0x18d8d16d7ab07691ULL, 0xf8761df6c0ed43dbULL, 0x8c845959c643834fULL,
	0xe5a2ac749a42438cULL, 0x7cabce2be5fffdedULL, 0xf8e24a1bd7ef1cdbULL,
	0x6d7afac403b24c0bULL, 0x779e9a12ed21569aULL, 0xa54bb48aa88a6c1fULL,
	0xb310fdb14d2d6656ULL, 0xbef02b8aa815f657ULL, 0x53521fd8be504ccaULL,
	0x42c493869b5bbe2aULL, 0x735cf572264f94afULL, 0xdf30279914f4a2e7ULL,
	0x081313c7649e9e41ULL, 0x3d6f26545bb31816ULL, 0x1c4b877c5701a87dULL,
	0x74389d491b7e8ffbULL, 0x2893fbb9d7f2cf8cULL, 0xbedc827782185636ULL,
	0xa52cd9969c6be2a8ULL, 0xe0f920c34c047cfdULL, 0x9142c8fc37798464ULL,
	0xb3db0b226bd3c312ULL, 0x6f6c62a100fbae05ULL, 0x98f2d160b23066c9ULL,
	0x59e0012dc2d7303dULL, 0xa169d94549cd99caULL, 0x7414a25ecfe47071ULL,
	0x37ca46f9e2670e5eULL, 0x9dc55fbcfe86f773ULL, 0x7fa19961c95ee57cULL,
	0xad7b0feac2dc251fULL, 0x1246369c9c257c89ULL, 0xb75461f081f53a67ULL,
	0x3e742396dabb679aULL, 0xaff80570e2bf937eULL, 0x1d256997d5e8cb76ULL,
	0xc302522b9e6a1c3cULL, 0xdb7baeeb067fc845ULL, 0x74245d1f9c4d2b4eULL,
	0x94f066c78ddc8bbaULL, 0x3ef1a7d5760ca6c8ULL, 0xf96516c54562ec5cULL,
	0x4f137e9db5157eeaULL, 0xa60e3aa2a4544b62ULL, 0x48e363a59d3c3150ULL,
	0xb27c974e2e958885ULL, 0x454b759abf485ad3ULL, 0xade7046266cc0d4dULL,
	0xcb725d773b90621eULL, 0x14e3e7a7cc19090cULL, 0xc016c4bdaea53d93ULL,
	0x6a160530e8814897ULL, 0x135c547d2df1df85ULL, 0x77c6b3a78fca7eefULL,
	0xc83c0b67894e34e0ULL, 0x47da32d58e8aff91ULL, 0x7645a790c8fecdaeULL,
	0x548e65554819baa2ULL, 0xd85b16b34ded4e09ULL, 0xa346da6f7cdd5f89ULL,
	0x29a42f9d18f89739ULL, 0x818f75af07fb3019ULL, 0x5477ab404513afffULL,
	0xc7027c8974e635f6ULL, 0x81741945833774f0ULL, 0xabece1fb44a1a1faULL,
	0xef43ebf34f28765eULL, 0xb045497417e466c1ULL, 0x3f726a0ad466878fULL,
	0xaa34826732c046baULL, 0xe23de0f2b311eba8ULL, 0xfc5aed3d8d3fbe01ULL,
	0xe7b94f65a765938cULL, 0x6a259de73a351ed7ULL, 0xa0ad1f5f4d05ae6dULL,
	0x33f9b74197219dadULL, 0xc5e686ca8c78b17dULL, 0x249ad8d42107a884ULL,
	0xd0d5301ba15d5704ULL, 0x73e180b87e506a46ULL, 0xf034aa882695cc30ULL,
	0x241d88b0ab6b1cefULL, 0x597211e1cba8c441ULL, 0x975b30f24aab0517ULL,
	0x2fa3e6dbda352bd4ULL, 0x90a833e8199e1198ULL, 0x26d5ee806c771580ULL,
	0xd207c53f90e14248ULL, 0xa0aefa918b8e48b8ULL, 0x77919b4e3f478aa2ULL,
	0x7fabe52584920c1aULL, 0x180f53cf2cc2e4b7ULL, 0x0f75b27c297a8d33ULL,
	0x7426767e54affd97ULL, 0xae26568e318baa33ULL, 0xd172940a8aa305a7ULL,
	0xa917b7aa4e6197c7ULL, 0x7e04f0aad1ae4de5ULL, 0xd549d41f37eb3083ULL,
	0x5a7a9ea6cee5de38ULL, 0xf8f4d6d4a1a2e81aULL, 0x9660922a92fc7d87ULL,
	0x88c0eac6254107f5ULL, 0x2954f061a75924edULL, 0x103e434221409c42ULL,
	0x7d82121dae803c64ULL, 0x30510c9e8f97a316ULL, 0x3a84b9fbd2e77b4eULL,
	0x29603770e70b21a1ULL, 0xed40b494e1f23c45ULL, 0xb49a51d71e6f57a3ULL,
	0x243a8b283e60a71eULL, 0x5483ada4ced8ecf2ULL, 0xeab9989e99f57e82ULL,
	0x46a1287632b0ce09ULL, 0x231966486fd90fc9ULL, 0x413891abe188c45cULL,
	0x843b6d771d7d3913ULL, 0x4dc54e61bf8ef549ULL, 0x69308ae95939b921ULL,
	0x894d24a277658555ULL,
};

/* A mask of the n highest bits: the gear hash's high bits depend on the last
 * 64 bytes, its low bits only on the last few. */
static uint64_t top_bits(unsigned n)
{
	return n == 0 ? 0 : ~0ULL << (64 - n);
}

int fastcdc_init(struct fastcdc *c, uint32_t min, uint32_t avg, uint32_t max)
{
	unsigned bits = 0;

	if (min < 64 || min > avg || avg > max || max > 64u << 20 || (avg & (avg - 1)))
		return -EINVAL;
	while ((1u << bits) < avg)
		bits++;
	c->min = min;
	c->avg = avg;
	c->max = max;
	/* normalization level 2: two bits stricter below avg, two looser above */
	c->mask_s = top_bits(bits + 2);
	c->mask_l = top_bits(bits > 2 ? bits - 2 : 1);
	return 0;
}

size_t fastcdc_cut(const struct fastcdc *c, const uint8_t *buf, size_t len)
{
	size_t n, normal, i;
	uint64_t h = 0;

	if (len <= c->min)
		return len;
	n = len < c->max ? len : c->max;
	normal = n < c->avg ? n : c->avg;
	for (i = c->min; i < normal; i++) {
		h = (h << 1) + fastcdc_gear[buf[i]];
		if (!(h & c->mask_s))
			return i + 1;
	}
	for (; i < n; i++) {
		h = (h << 1) + fastcdc_gear[buf[i]];
		if (!(h & c->mask_l))
			return i + 1;
	}
	return n;
}

uint64_t fastcdc_hash(const uint8_t *buf, size_t len)
{
	uint64_t h = 0;

	for (size_t i = 0; i < len; i++)
		h = (h << 1) + fastcdc_gear[buf[i]];
	return h;
}
