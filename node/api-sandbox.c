/*
 * api-sandbox.c — the API's sandbox routes: each a translation of one
 * request into one call of sandbox/service.h and of its answer back.  No
 * state is kept here: the keepers and the state tree hold it all, so a
 * worker that replaces a crashed one answers for every sandbox at once.
 *
 * The service's errors map to statuses: -EINVAL 400, -ENOENT 404, -EEXIST
 * and -ESRCH (the sandbox has ended) 409, -EAGAIN 429, anything else 500;
 * the message is the service's line.
 */
#include "lib/json.h"
#include "lib/lib.h"
#include "node/api-internal.h"
#include "node/httpd.h"
#include "sandbox/service.h"

#define API_WAIT_MAX 600.0        /* ?wait= seconds */
#define API_FOLLOW_MAX 3600.0     /* an output stream that follows, at most */

static unsigned status_of(int r)
{
	switch (r) {
	case -EINVAL: return 400;
	case -ENOENT: return 404;
	case -EEXIST:
	case -ESRCH: return 409;
	case -EAGAIN: return 429;
	default: return 500;
	}
}

int api_service_error(struct node_http_reply *rep, int r, const struct sandbox_service_err *err)
{
	return node_http_error(rep, status_of(r), "%s", err->msg[0] ? err->msg : strerror(-r));
}

static int answer_json(struct node_http_reply *rep, unsigned status, json_t *v)
{
	rep->status = status;
	rep->content_type = "application/json";
	return json_file_add(rep->body, v);
}

/* A non-negative number of seconds from query parameter name, at most max
 * (absent: 0). */
static int arg_seconds(const struct node_http_request *req, const char *name, double max,
                       double *ret, struct node_http_reply *rep)
{
	const char *s = node_http_arg(req, name);

	*ret = 0;
	if (!s)
		return 0;
	if (parse_seconds(s, max, ret) < 0)
		return node_http_error(rep, 400, "%s %s: '%s' must be seconds from 0 to %.0f",
		                       req->method, req->path, name, max), 1;
	return 0;
}

static int arg_offset(const struct node_http_request *req, const char *name, uint64_t *ret,
                      struct node_http_reply *rep)
{
	const char *s = node_http_arg(req, name);

	*ret = 0;
	if (s && parse_uint(s, UINT64_MAX / 2, ret) < 0)
		return node_http_error(rep, 400, "%s %s: '%s' must be a byte offset", req->method,
		                       req->path, name), 1;
	return 0;
}

static bool arg_on(const struct node_http_request *req, const char *name)
{
	const char *s = node_http_arg(req, name);

	return s && (!strcmp(s, "1") || !strcmp(s, "true"));
}

int api_create(const struct sandbox_node *node, const struct node_config *cfg,
               const struct node_http_request *req, struct node_http_reply *rep)
{
	struct api_create_req c;
	struct api_err aerr = { "" };
	struct sandbox_service_err err = { "" };
	struct sandbox_service_request sr;
	_cleanup_free_ char *id = NULL;
	json_t *doc = NULL;
	int r = api_parse_create(req->body, req->body_len, &c, &doc, &aerr);

	if (r == -EINVAL)
		return node_http_error(rep, 400, "%s", aerr.msg);
	if (r < 0)
		return r;
	if (c.image) {
		r = api_create_image(node, cfg, &c, &id, rep);
		if (r == 0 && id)
			r = answer_json(rep, 201, json_pack("{s:s}", "id", id));
		goto out;
	}
	/* api_kv and sandbox_service_kv are both {key, value} */
	sr = (struct sandbox_service_request){
		.rootfs = c.rootfs, .name = c.name,
		.set = (const struct sandbox_service_kv *)c.set, .n_set = c.n_set,
		.labels = (const struct sandbox_service_kv *)c.labels, .n_labels = c.n_labels,
		.ttl = c.ttl, .idle_timeout = c.idle_timeout,
	};
	r = sandbox_service_create(node, &sr, &id, &err);
	if (r < 0)
		r = api_service_error(rep, r, &err);
	else
		r = answer_json(rep, 201, json_pack("{s:s}", "id", id));
out:
	api_create_req_free(&c);
	json_decref(doc);
	return r;
}

_Static_assert(sizeof(struct api_kv) == sizeof(struct sandbox_service_kv) &&
               offsetof(struct api_kv, value) == offsetof(struct sandbox_service_kv, value),
               "api_kv is sandbox_service_kv");

int api_list(const struct sandbox_node *node, const struct node_http_request *req,
             struct node_http_reply *rep)
{
	struct sandbox_service_err err = { "" };
	const char *label = node_http_arg(req, "label");
	json_t *list = NULL;
	int r;

	if (label && (!strchr(label, '=') || strchr(label, '=') == label))
		return node_http_error(rep, 400, "GET /v1/sandboxes: 'label' must be KEY=VALUE");
	r = sandbox_service_list(node, label, &list, &err);
	if (r < 0)
		return api_service_error(rep, r, &err);
	return answer_json(rep, 200, json_pack("{s:o}", "sandboxes", list));
}

int api_get(const struct sandbox_node *node, const struct node_http_request *req,
            struct node_http_reply *rep)
{
	struct sandbox_service_err err = { "" };
	json_t *v = NULL;
	int r = sandbox_service_get(node, req->param[0], &v, &err);

	if (r < 0)
		return api_service_error(rep, r, &err);
	return answer_json(rep, 200, v);
}

int api_destroy(const struct sandbox_node *node, const struct node_http_request *req,
                struct node_http_reply *rep)
{
	struct sandbox_service_err err = { "" };
	int r = sandbox_service_destroy(node, req->param[0], &err);

	if (r < 0)
		return api_service_error(rep, r, &err);
	rep->status = 204;
	return 0;
}

static int output_stream(const struct sandbox_node *node, const struct node_http_request *req,
                         const char *id, const char *eid, uint64_t out_off, uint64_t err_off,
                         bool follow, struct node_http_reply *rep)
{
	char dir[4096];
	struct api_output *o = NULL;
	int r = sandbox_service_exec_dir(node, id, eid, dir, sizeof(dir));

	if (r == 0)
		r = api_output_open(dir, out_off, err_off, follow, API_FOLLOW_MAX, req->stopping, &o);
	if (r == -ENOENT)
		return node_http_error(rep, 404, "sandbox '%s' has no exec '%s'", id, eid);
	if (r < 0)
		return node_http_error(rep, status_of(r), "exec '%s' of sandbox '%s': %s", eid, id,
		                       strerror(-r));
	rep->content_type = "application/vnd.lazyroot.stream";
	rep->stream = (struct node_http_stream){ api_output_read, api_output_free, o };
	return 0;
}

int api_exec(const struct sandbox_node *node, const struct node_http_request *req,
             struct node_http_reply *rep)
{
	struct api_exec_req e;
	struct api_err aerr = { "" };
	struct sandbox_service_err err = { "" };
	struct sandbox_exec_request sr;
	_cleanup_free_ char *eid = NULL;
	json_t *doc = NULL;
	bool existed = false;
	int r = api_parse_exec(req->body, req->body_len, &e, &doc, &aerr);

	if (r == -EINVAL)
		return node_http_error(rep, 400, "%s", aerr.msg);
	if (r < 0)
		return r;
	if (e.stdin_pipe) {
		r = node_http_error(rep, 400, "exec: 'stdin' \"pipe\" is not served by the API yet "
		                    "(no PUT .../stdin): give \"none\"");
		goto out;
	}
	sr = (struct sandbox_exec_request){
		.exec_id = e.exec_id, .argv = e.argv, .env = e.env, .cwd = e.cwd, .user = e.user,
		.timeout = e.timeout, .output_limit = e.output_limit,
	};
	r = sandbox_service_exec(node, req->param[0], &sr, &eid, &existed, NULL, &err);
	if (r < 0)
		r = api_service_error(rep, r, &err);
	else if (arg_on(req, "attach"))
		r = output_stream(node, req, req->param[0], eid, 0, 0, true, rep);
	else
		r = answer_json(rep, existed ? 200 : 201,
		                json_pack("{s:s, s:b}", "exec_id", eid, "existed", existed));
out:
	api_exec_req_free(&e);
	json_decref(doc);
	return r;
}

int api_exec_get(const struct sandbox_node *node, const struct node_http_request *req,
                 struct node_http_reply *rep)
{
	struct sandbox_service_err err = { "" };
	json_t *v = NULL;
	double wait;
	int r;

	if (arg_seconds(req, "wait", API_WAIT_MAX, &wait, rep))
		return 0;
	r = sandbox_service_exec_get(node, req->param[0], req->param[1], wait, &v, &err);
	if (r < 0)
		return api_service_error(rep, r, &err);
	return answer_json(rep, 200, v);
}

int api_output(const struct sandbox_node *node, const struct node_http_request *req,
               struct node_http_reply *rep)
{
	uint64_t out_off, err_off;

	if (arg_offset(req, "stdout", &out_off, rep) || arg_offset(req, "stderr", &err_off, rep))
		return 0;
	if (!api_id_valid(req->param[1]))
		return node_http_error(rep, 404, "sandbox '%s' has no exec '%.64s'", req->param[0],
		                       req->param[1]);
	return output_stream(node, req, req->param[0], req->param[1], out_off, err_off,
	                     arg_on(req, "follow"), rep);
}

int api_stage(const struct sandbox_node *node, const struct node_http_request *req,
              struct node_http_reply *rep)
{
	struct api_err aerr = { "" };
	struct sandbox_service_err err = { "" };
	_cleanup_free_ char *cur = NULL;
	const char *stage;
	json_t *doc = NULL;
	int r = api_parse_stage(req->body, req->body_len, &stage, &doc, &aerr);

	if (r == -EINVAL)
		return node_http_error(rep, 400, "%s", aerr.msg);
	if (r < 0)
		return r;
	r = sandbox_service_stage(node, req->param[0], stage, &cur, &err);
	json_decref(doc);
	if (r < 0)
		return api_service_error(rep, r, &err);
	return answer_json(rep, 200, json_pack("{s:s?}", "stage", cur));
}
