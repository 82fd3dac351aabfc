/* tools.h — the `lazyroot` subcommands and the option helpers they share. */
#ifndef LAZYROOT_TOOLS_H
#define LAZYROOT_TOOLS_H

#include <stddef.h>
#include <stdio.h>

int cmd_build(int argc, char **argv);
int cmd_image(int argc, char **argv);
int cmd_cache(int argc, char **argv);
int cmd_run(int argc, char **argv);

/* The store URL: the --store value if given, else $LAZYROOT_STORE, else the
 * embedded default. */
const char *tools_store_url(const char *opt);

/* Print s (len bytes) as a JSON string literal. */
void tools_json_string(FILE *f, const char *s, size_t len);

#endif
