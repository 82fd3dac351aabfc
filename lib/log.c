/* log.c — one-line messages to stderr, and helpers that return the error they log. */
#include "lib/lib.h"

int log_verbosity = LOG_WARN;

/* log_detail()'s note, per thread: the store that sets it completes requests
 * on the thread whose caller then logs the error */
static __thread int detail_err;
static __thread char detail[512];
static __thread char detail_cause[64];   /* empty: strerror */

__attribute__((format(printf, 1, 0)))
static void vlog(const char *fmt, va_list ap, int err)
{
	char msg[1024];

	vsnprintf(msg, sizeof(msg), fmt, ap);
	if (err && detail_err == err) {
		fprintf(stderr, "lazyroot: %s: %s (%s)\n", msg,
		        *detail_cause ? detail_cause : strerror(-err), detail);
		detail_err = 0;
	} else if (err)
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

void log_detail(int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(detail, sizeof(detail), fmt, ap);
	va_end(ap);
	detail_err = err;
	detail_cause[0] = 0;
}

void log_detail_as(int err, const char *cause, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(detail, sizeof(detail), fmt, ap);
	va_end(ap);
	detail_err = err;
	snprintf(detail_cause, sizeof(detail_cause), "%s", cause);
}
