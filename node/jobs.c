/*
 * jobs.c — prefetch requests: a job started from the request (store, index,
 * cache, profile, then node/prefetch.c's engine) and answered once the
 * engine has finished.
 */
#include "image/image.h"
#include "lib/json.h"
#include "lib/lib.h"
#include "node/node-internal.h"
#include "node/prefetch.h"
#include "store/store.h"

void node_job_free(struct pjob *j)
{
	if (!j)
		return;
	node_prefetch_free(j->pf);
	node_index_free(&j->im);
	free(j->pack_offsets);
	free(j->ref);
	free(j->cache_dir);
	if (j->have_cfg)
		node_config_destroy(&j->cfg);
	buf_free(&j->log);
	free(j);
}

/* Start a prefetch; the client gets its answer when it ends (1). */
int node_job_start(struct worker *w, const json_t *req, struct pjob **ret)
{
	struct pjob *j = calloc(1, sizeof(*j));
	const char *ref;
	const json_t *paths = json_object_get(req, "paths");
	_cleanup_free_ const char **pv = NULL;
	struct image_profile *prof = NULL;
	bool profiled = false, no_profile = false;
	struct nstore *st;
	struct ncache *nc;
	int64_t timeout = 0;
	int r = j ? 0 : -ENOMEM;

	if (!j)
		return r;
	ref = node_req_str(req, "ref", &r);
	if (r == 0 && !ref)
		r = log_error(-EINVAL, "request: prefetch: no ref");
	if (r == 0) {
		r = node_request_config(w, req, &j->cfg);
		j->have_cfg = r == 0;
		timeout = (int64_t)j->cfg.fetch_timeout_ms;
	}
	if (r == 0 && ((json_object_get(req, "decode") && json_bool(json_object_get(req, "decode"), &j->decode) < 0) ||
	               (json_object_get(req, "profiled") && json_bool(json_object_get(req, "profiled"), &profiled) < 0) ||
	               (json_object_get(req, "no_profile") && json_bool(json_object_get(req, "no_profile"), &no_profile) < 0) ||
	               (json_object_get(req, "progress") && json_bool(json_object_get(req, "progress"), &j->progress) < 0) ||
	               (json_object_get(req, "fetch_timeout_ms") &&
	                (json_int(json_object_get(req, "fetch_timeout_ms"), &timeout) < 0 || timeout < 0))))
		r = log_error(-EINVAL, "request: prefetch: a bad option");
	if (r == 0 && paths && !json_is_array(paths))
		r = log_error(-EINVAL, "request: prefetch: paths: not an array");
	if (r == 0 && json_array_size(paths)) {
		pv = calloc(json_array_size(paths), sizeof(*pv));
		if (!pv)
			r = -ENOMEM;
		for (size_t i = 0; r == 0 && i < json_array_size(paths); i++)
			if (!(pv[i] = json_cstr(json_array_get(paths, i))))
				r = log_error(-EINVAL, "request: prefetch: paths: not strings");
	}
	if (r < 0)
		goto fail;
	j->ref = strdup(ref);
	j->cache_dir = strdup(j->cfg.cache_dir);
	j->cfg.fetch_timeout_ms = (uint64_t)timeout;
	st = j->st = node_store_get(w, &j->cfg);
	if (!j->ref || !j->cache_dir || !st) {
		r = -EIO;
		goto fail;
	}
	/* the index first: a cache disk without room for it says so */
	r = node_store_resolve(st, ref, j->cfg.tag_ttl_ms, j->hex);
	if (r == 0)
		r = node_index_load(st->s, j->cache_dir, j->hex, &j->im);
	if (r == 0)
		r = node_index_keep(&j->im);
	if (r < 0)
		goto fail;
	nc = node_cache_get(w, &j->cfg);
	if (!nc) {
		r = -EIO;
		goto fail;
	}
	j->nc = nc;
	r = node_pack_offsets(st->s, j->im.img, j->hex, &j->pack_offsets);
	if (r < 0)
		goto fail;
	if (!no_profile && j->cfg.profile) {
		struct image_info info;
		const char *why = NULL;

		image_get_info(j->im.img, &info);
		(void)node_profile_fetch(st->s, j->hex, &prof);
		if (prof && image_profile_check(prof, info.chunks, &why) < 0) {
			log_msg(LOG_WARN, "profile of index %s: %s; not used", j->hex, why);
			image_profile_free(prof);
			prof = NULL;
		}
		if (profiled && !prof) {
			r = log_error(-ENOENT, "prefetch '%s': --profiled, but the store has no usable "
			              "profile of index %s", ref, j->hex);
			goto fail;
		}
	}
	{
		struct node_prefetch_params pp = {
			.img = j->im.img,
			.hex = j->hex,
			.ref = ref,
			.cache = nc->c,
			.store = st->s,
			.pack_offsets = j->pack_offsets,
			.prof = prof,
			.paths = pv,
			.npaths = json_array_size(paths),
			.decode = j->decode,
			.profiled = profiled,
		};

		r = node_prefetch_start(&pp, &j->pf);
	}
	image_profile_free(prof);
	if (r < 0)
		goto fail;
	*ret = j;
	return 1;
fail:
	node_job_free(j);
	return r < 0 ? r : -EIO;
}

/* The answer to a finished prefetch. */
int node_job_reply(struct pjob *j, struct buf *reply)
{
	struct node_prefetch_result res;
	char err[512] = "";
	json_t *v;
	int r = 0;

	node_prefetch_result(j->pf, &res);
	if (res.failed)
		snprintf(err, sizeof(err), "prefetch '%s': %llu of %llu chunks could not be fetched: %s",
		         j->ref, (unsigned long long)res.failed, (unsigned long long)res.chunks,
		         strerror(-(res.first_error ? res.first_error : -EIO)));
	else if (res.unkept)
		snprintf(err, sizeof(err), "prefetch '%s': %llu of %llu chunks could not be written "
		         "into cache '%s' (disk full or failing)", j->ref,
		         (unsigned long long)res.unkept, (unsigned long long)res.chunks, j->cache_dir);
	v = json_pack("{s:b, s:s, s:s, s:o, s:o, s:o, s:o}", "ok", !*err, "index", j->hex, "mode",
	              j->decode ? "decoded" : "staged", "chunks", json_u64(res.chunks),
	              "bytes", json_u64(res.bytes), "failed", json_u64(res.failed),
	              "seconds", json_fixed(res.seconds, 3));
	if (v && *err && json_object_set_new(v, "error", json_text(err, strlen(err))) < 0)
		r = -ENOMEM;
	if (v && j->log.len > 1 &&
	    json_object_set_new(v, "log", json_text((char *)j->log.data, j->log.len - 1)) < 0)
		r = -ENOMEM;
	if (r < 0) {
		json_decref(v);
		return r;
	}
	return json_buf_add(reply, v) ?: buf_append(reply, "\n", 1);
}

int node_job_progress(struct pjob *j, struct buf *line)
{
	struct node_prefetch_result res;
	uint64_t now = now_ns();

	if (!j->progress || now - j->progress_ns < NODE_JOB_PROGRESS_NS)
		return 0;
	j->progress_ns = now;
	node_prefetch_result(j->pf, &res);
	line->len = 0;
	return json_pack_buf(line, "{s:{s:o, s:o, s:o, s:o, s:o}}", "progress",
	                     "chunks_done", json_u64(res.done), "chunks", json_u64(res.chunks),
	                     "bytes_done", json_u64(res.bytes), "bytes", json_u64(res.total_bytes),
	                     "seconds", json_fixed(res.seconds, 3)) ?:
	       buf_append(line, "\n", 1) ?: 1;
}
