/*
 * fuzz_registry.c — libFuzzer target for the registry source's parsers of
 * outside input: image references (docker://…) and WWW-Authenticate
 * challenge parameters.  A reference parses whole or is refused with -EINVAL,
 * and what parses obeys its grammar; a parameter fits its buffer.
 */
#include <stdlib.h>

#include "chunker/chunker-internal.h"
#include "chunker/chunker.h"
#include "lib/lib.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *const keys[] = { "realm", "service", "scope", "" };
	struct registry_ref ref;
	char *s = malloc(size + 1), out[16];
	size_t i;
	int r;

	if (!s)
		return 0;
	memcpy(s, data, size);
	s[size] = 0;

	r = registry_parse_ref(s, &ref);
	if (r == 0) {
		if (!ref.host[0] || !ref.repo[0] || !ref.reference[0])
			abort();
		if (ref.by_digest && (strncmp(ref.reference, "sha256:", 7) != 0 ||
		                      strlen(ref.reference) != 71))
			abort();
		if (strstr(ref.repo, "//") || ref.repo[0] == '/' ||
		    ref.repo[strlen(ref.repo) - 1] == '/')
			abort();
	} else if (r != -EINVAL) {
		abort();
	}
	for (i = 0; i < ARRAY_SIZE(keys); i++)
		if (registry_challenge_param(s, keys[i], out, sizeof(out)) && strlen(out) >= sizeof(out))
			abort();
	free(s);
	return 0;
}
