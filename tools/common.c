/* common.c — option helpers shared by the subcommands. */
#include "lib/lib.h"
#include "cache/cache.h"
#include "store/store.h"
#include "tools/tools.h"

const char *tools_store_url(const char *opt)
{
	const char *env = getenv("LAZYROOT_STORE");

	if (opt && *opt)
		return opt;
	if (env && *env)
		return env;
	return STORE_DEFAULT_URL;
}

int tools_s3_endpoint(const char *url)
{
	if (strncmp(url, "http://", 7) && strncmp(url, "https://", 8))
		return log_error(-EINVAL, "--s3-endpoint '%s': want http[s]://HOST[:PORT]", url);
	if (setenv("AWS_ENDPOINT_URL_S3", url, 1) < 0)
		return log_errno(-errno, "--s3-endpoint '%s'", url);
	return 0;
}

const char *tools_cache_dir(const char *opt)
{
	const char *env = getenv("LAZYROOT_CACHE");

	if (opt && *opt)
		return opt;
	if (env && *env)
		return env;
	return CACHE_DEFAULT_DIR;
}

void tools_json_string(FILE *f, const char *s, size_t len)
{
	fputc('"', f);
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c == '"' || c == '\\')
			fprintf(f, "\\%c", c);
		else if (c == '\n')
			fputs("\\n", f);
		else if (c == '\t')
			fputs("\\t", f);
		else if (c < 0x20 || c == 0x7f)
			fprintf(f, "\\u%04x", c);
		else
			fputc(c, f);
	}
	fputc('"', f);
}
