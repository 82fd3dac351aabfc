/* log.c — one-line messages to stderr, and helpers that return the error they log. */
#include "lib/lib.h"

int log_verbosity = LOG_WARN;

__attribute__((format(printf, 1, 0)))
static void vlog(const char *fmt, va_list ap, int err)
{
	char msg[1024];

	vsnprintf(msg, sizeof(msg), fmt, ap);
	if (err)
		fprintf(stderr, "lazyroot: %s: %s\n", msg, strerror(-err));
	else
		fprintf(stderr, "lazyroot: %s\n", msg);
}

void log_msg(enum log_level lvl, const char *fmt, ...)
{
	va_list ap;

	if ((int)lvl > log_verbosity)
		return;
	va_start(ap, fmt);
	vlog(fmt, ap, 0);
	va_end(ap);
}

int log_errno(int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vlog(fmt, ap, err < 0 ? err : -EIO);
	va_end(ap);
	return err;
}

int log_error(int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vlog(fmt, ap, 0);
	va_end(ap);
	return err;
}
