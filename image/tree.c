/*
 * tree.c — the mutable image tree that builders fill before image_write().
 *
 * Entries (struct tree_node) and inodes (struct image_inode) are separate so
 * that hard links can share an inode; an inode counts the entries naming it
 * and is freed with the last one.  Directories always have exactly one entry.
 *
 * Every child is reachable two ways: from its parent's linked list (for
 * iteration and subtree removal) and from one tree-wide hash table keyed by
 * (parent, name) (for lookup), so adding an entry to a directory of any size
 * costs O(path depth), and a 1,000,000-entry tree builds in about a second.
 * Deep trees never recurse: subtree walks follow parent/sibling pointers.
 *
 * Layers: each entry remembers the highest layer that added it or anything
 * beneath it, which is what lets image_tree_clear_lower() keep everything an
 * upper layer put under an opaque directory, in whatever order the layer's
 * members arrive.
 */
#include <limits.h>
#include <sys/stat.h>

#include "image/image-internal.h"

#define HTAB_MIN 1024

/* ---- path components ------------------------------------------------------- */

/*
 * Check that path is in the tree's normal form: components separated by
 * single '/', none empty, "." or "..", none longer than IMAGE_NAME_MAX.
 * "" (the root) is valid.
 */
static int path_check(const char *path)
{
	const char *p = path, *e;
	size_t n;

	if (!path)
		return -EINVAL;
	if (!*p)
		return 0;
	for (;;) {
		e = strchrnul(p, '/');
		n = (size_t)(e - p);
		if (n == 0)
			return -EINVAL;
		if (n > IMAGE_NAME_MAX)
			return -ENAMETOOLONG;
		if (p[0] == '.' && (n == 1 || (n == 2 && p[1] == '.')))
			return -EINVAL;
		if (!*e)
			return 0;
		p = e + 1;
	}
}

int image_path_normalize(const char *in, char *out, size_t outlen)
{
	const char *p, *e;
	size_t o = 0, n;

	if (!in || !out || outlen == 0)
		return -EINVAL;
	for (p = in; *p; p = *e ? e + 1 : e) {
		e = strchrnul(p, '/');
		n = (size_t)(e - p);
		if (n == 0 || (n == 1 && p[0] == '.'))
			continue;
		if (n == 2 && p[0] == '.' && p[1] == '.') {
			/* Lexical: drop the last component; at the root the
			 * name would climb out of the tree. */
			if (o == 0)
				return -EINVAL;
			while (o > 0 && out[o - 1] != '/')
				o--;
			if (o > 0)
				o--;
			continue;
		}
		if (n > IMAGE_NAME_MAX)
			return -ENAMETOOLONG;
		if (o + (o > 0) + n + 1 > outlen)
			return -ENAMETOOLONG;
		if (o > 0)
			out[o++] = '/';
		memcpy(out + o, p, n);
		o += n;
	}
	out[o] = 0;
	return (int)MIN(o, (size_t)INT_MAX);
}

/* ---- hash table of (parent, name) -> entry ---------------------------------- */

static uint64_t node_hash(const struct tree_node *parent, const char *name, size_t len)
{
	uint64_t h = hash64(name, len) ^ ((uint64_t)(uintptr_t)parent * 0x9e3779b97f4a7c15ull);

	return h ^ (h >> 31);
}

static struct tree_node *htab_find(const struct image_tree *t, const struct tree_node *parent,
                                   const char *name, size_t len)
{
	uint64_t h = node_hash(parent, name, len);
	struct tree_node *n;

	for (n = t->htab[h & (t->hsize - 1)]; n; n = n->hnext)
		if (n->hash == h && n->parent == parent && n->name_len == len &&
		    memcmp(n->name, name, len) == 0)
			return n;
	return NULL;
}

static int htab_grow(struct image_tree *t)
{
	size_t nsize = t->hsize * 2, i;
	struct tree_node **nt, *n, *next;

	nt = calloc(nsize, sizeof(*nt));
	if (!nt)
		return -ENOMEM;
	for (i = 0; i < t->hsize; i++)
		for (n = t->htab[i]; n; n = next) {
			next = n->hnext;
			n->hnext = nt[n->hash & (nsize - 1)];
			nt[n->hash & (nsize - 1)] = n;
		}
	free(t->htab);
	t->htab = nt;
	t->hsize = nsize;
	return 0;
}

static void htab_remove(struct image_tree *t, struct tree_node *node)
{
	struct tree_node **pp = &t->htab[node->hash & (t->hsize - 1)];

	for (; *pp; pp = &(*pp)->hnext)
		if (*pp == node) {
			*pp = node->hnext;
			t->hcount--;
			return;
		}
}

/* ---- inodes and entries ---------------------------------------------------- */

/* A new inode with one reference for the caller and one kept by the tree
 * (see image_tree.all). */
static struct image_inode *inode_new(struct image_tree *t, const struct image_attr *a)
{
	struct image_inode *ino;

	if (t->n_all == t->cap_all) {
		size_t cap = t->cap_all ? t->cap_all * 2 : 256;
		struct image_inode **v = reallocarray(t->all, cap, sizeof(*v));

		if (!v)
			return NULL;
		t->all = v;
		t->cap_all = cap;
	}
	ino = calloc(1, sizeof(*ino));
	if (!ino)
		return NULL;
	ino->attr = *a;
	ino->refs = 2;
	t->all[t->n_all++] = ino;
	return ino;
}

static void inode_clear_xattrs(struct image_inode *ino)
{
	uint32_t i;

	for (i = 0; i < ino->n_xattrs; i++) {
		free(ino->xattrs[i].name);
		free(ino->xattrs[i].value);
	}
	free(ino->xattrs);
	ino->xattrs = NULL;
	ino->n_xattrs = 0;
}

static void inode_unref(struct image_inode *ino)
{
	if (!ino || --ino->refs > 0)
		return;
	inode_clear_xattrs(ino);
	free(ino->symlink);
	free(ino->extents);
	free(ino);
}

/* Make a child entry of parent that takes over one reference of ino. */
static int node_new(struct image_tree *t, struct tree_node *parent, const char *name,
                    size_t len, struct image_inode *ino, struct tree_node **ret)
{
	struct tree_node *n;
	size_t b;
	int r;

	if (t->hcount >= t->hsize) {
		r = htab_grow(t);
		if (r < 0)
			return r;
	}
	n = calloc(1, sizeof(*n) + len + 1);
	if (!n)
		return -ENOMEM;
	memcpy(n->name, name, len);
	n->name_len = (uint16_t)len;
	n->inode = ino;
	n->layer = t->layer;
	n->parent = parent;
	n->hash = node_hash(parent, name, len);
	b = n->hash & (t->hsize - 1);
	n->hnext = t->htab[b];
	t->htab[b] = n;
	t->hcount++;
	n->next = parent->first_child;
	if (n->next)
		n->next->prev = n;
	parent->first_child = n;
	parent->n_children++;
	t->n_nodes++;
	*ret = n;
	return 0;
}

/* Unlink a childless entry from its parent and the hash table, and free it. */
static void node_destroy(struct image_tree *t, struct tree_node *n)
{
	if (n->parent) {
		if (n->prev)
			n->prev->next = n->next;
		else
			n->parent->first_child = n->next;
		if (n->next)
			n->next->prev = n->prev;
		n->parent->n_children--;
		htab_remove(t, n);
	}
	inode_unref(n->inode);
	t->n_nodes--;
	free(n);
}

/* Free node and everything beneath it, without recursion: always destroy a
 * leaf, then climb back to its parent.  Each entry is passed once per child
 * plus once, so the cost is linear in the subtree's size. */
static void subtree_free(struct image_tree *t, struct tree_node *node)
{
	struct tree_node *cur = node, *parent;
	bool last;

	for (;;) {
		while (cur->first_child)
			cur = cur->first_child;
		parent = cur->parent;
		last = cur == node;
		node_destroy(t, cur);
		if (last)
			return;
		cur = parent;
	}
}

/* ---- the tree -------------------------------------------------------------- */

int image_tree_new(struct image_tree **ret)
{
	struct image_attr root = { .mode = S_IFDIR | 0755 };
	struct image_tree *t;

	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->hsize = HTAB_MIN;
	t->htab = calloc(t->hsize, sizeof(*t->htab));
	t->root = calloc(1, sizeof(*t->root) + 1);
	if (t->root)
		t->root->inode = inode_new(t, &root);
	if (!t->htab || !t->root || !t->root->inode) {
		image_tree_free(t);
		return -ENOMEM;
	}
	t->n_nodes = 1;
	*ret = t;
	return 0;
}

void image_tree_free(struct image_tree *t)
{
	if (!t)
		return;
	if (t->root)
		subtree_free(t, t->root);
	for (size_t i = 0; i < t->n_all; i++)
		inode_unref(t->all[i]);
	free(t->all);
	free(t->htab);
	free(t->chunks);
	free(t->config);
	free(t);
}

void image_tree_set_layer(struct image_tree *t, unsigned layer)
{
	t->layer = layer;
}

/*
 * Walk path (already checked by path_check, not "") down to the directory
 * that holds its last component.  With create, missing directories are made
 * and every directory passed is marked as touched by the current layer.
 */
static int walk_parent(struct image_tree *t, const char *path, bool create,
                       struct tree_node **ret_parent, const char **ret_name, size_t *ret_len)
{
	static const struct image_attr dir_attr = { .mode = S_IFDIR | 0755 };
	struct tree_node *cur = t->root, *child;
	struct image_inode *ino;
	const char *p = path, *e;
	int r;

	for (;;) {
		e = strchrnul(p, '/');
		if (!*e)
			break;
		child = htab_find(t, cur, p, (size_t)(e - p));
		if (!child) {
			if (!create)
				return -ENOENT;
			ino = inode_new(t, &dir_attr);
			if (!ino)
				return -ENOMEM;
			r = node_new(t, cur, p, (size_t)(e - p), ino, &child);
			if (r < 0) {
				inode_unref(ino);
				return r;
			}
		} else if (!S_ISDIR(child->inode->attr.mode)) {
			return -ENOTDIR;
		}
		if (create && child->layer < t->layer)
			child->layer = t->layer;
		cur = child;
		p = e + 1;
	}
	*ret_parent = cur;
	*ret_name = p;
	*ret_len = (size_t)(e - p);
	return 0;
}

static struct tree_node *tree_find_node(struct image_tree *t, const char *path)
{
	struct tree_node *parent;
	const char *name;
	size_t len;

	if (path_check(path) < 0)
		return NULL;
	if (!*path)
		return t->root;
	if (walk_parent(t, path, false, &parent, &name, &len) < 0)
		return NULL;
	return htab_find(t, parent, name, len);
}

struct image_inode *image_tree_find(struct image_tree *t, const char *path)
{
	struct tree_node *n = tree_find_node(t, path);

	return n ? n->inode : NULL;
}

static int attr_check(const struct image_attr *a)
{
	if (!a || !image_mode_valid(a->mode) || a->mtime_nsec >= 1000000000u)
		return -EINVAL;
	return 0;
}

int image_tree_add(struct image_tree *t, const char *path, const struct image_attr *a,
                   struct image_inode **ret)
{
	struct tree_node *parent, *n;
	struct image_inode *ino;
	const char *name;
	size_t len;
	int r;

	r = attr_check(a);
	if (r < 0)
		return r;
	r = path_check(path);
	if (r < 0)
		return r;
	if (!*path) {
		if (!S_ISDIR(a->mode))
			return -EINVAL;
		n = t->root;
		goto update_dir;
	}
	r = walk_parent(t, path, true, &parent, &name, &len);
	if (r < 0)
		return r;
	n = htab_find(t, parent, name, len);
	if (n && S_ISDIR(n->inode->attr.mode) && S_ISDIR(a->mode))
		goto update_dir;
	if (n)
		subtree_free(t, n);
	ino = inode_new(t, a);
	if (!ino)
		return -ENOMEM;
	r = node_new(t, parent, name, len, ino, &n);
	if (r < 0) {
		inode_unref(ino);
		return r;
	}
	if (ret)
		*ret = ino;
	return 0;

update_dir:
	/* A directory listed again (a later layer, or a tar that names a
	 * directory after its children) brings its complete metadata: the
	 * caller sets its xattrs anew. */
	n->inode->attr = *a;
	inode_clear_xattrs(n->inode);
	if (n->layer < t->layer)
		n->layer = t->layer;
	if (ret)
		*ret = n->inode;
	return 0;
}

int image_tree_link(struct image_tree *t, const char *path, const char *target)
{
	struct tree_node *tn, *parent, *old, *n;
	struct image_inode *ino;
	const char *name;
	size_t len;
	int r;

	r = path_check(path);
	if (r < 0)
		return r;
	r = path_check(target);
	if (r < 0)
		return r;
	tn = tree_find_node(t, target);
	if (!tn)
		return -ENOENT;
	ino = tn->inode;
	if (S_ISDIR(ino->attr.mode))
		return -EPERM;
	if (!*path)
		return -EEXIST;
	/* Hold the inode: replacing the entry at path may drop the target's
	 * own entry (a link placed over an ancestor of its target). */
	ino->refs++;
	r = walk_parent(t, path, true, &parent, &name, &len);
	if (r < 0)
		goto fail;
	old = htab_find(t, parent, name, len);
	if (old && old->inode == ino) {
		if (old->layer < t->layer)
			old->layer = t->layer;
		r = 0;
		goto fail;
	}
	if (old)
		subtree_free(t, old);
	r = node_new(t, parent, name, len, ino, &n);
	if (r < 0)
		goto fail;
	return 0;
fail:
	inode_unref(ino);
	return r;
}

int image_tree_remove(struct image_tree *t, const char *path)
{
	struct tree_node *n;
	int r;

	r = path_check(path);
	if (r < 0)
		return r;
	if (!*path)
		return -EINVAL;
	n = tree_find_node(t, path);
	if (!n)
		return -ENOENT;
	subtree_free(t, n);
	return 0;
}

/* The next entry after n in a pre-order walk of dir that skips n's subtree. */
static struct tree_node *next_skipping(struct tree_node *dir, struct tree_node *n)
{
	for (; n != dir; n = n->parent)
		if (n->next)
			return n->next;
	return NULL;
}

/*
 * An opaque marker hides everything lower layers put anywhere beneath the
 * directory, not only its direct children: a subdirectory that the current
 * layer re-creates keeps only what the current layer put in it.  Entries that
 * the current layer added, or added anything beneath, survive.
 */
int image_tree_clear_lower(struct image_tree *t, const char *path)
{
	struct tree_node *dir, *c, *next;

	dir = tree_find_node(t, path);
	if (!dir)
		return -ENOENT;
	if (!S_ISDIR(dir->inode->attr.mode))
		return -ENOTDIR;
	c = dir->first_child;
	while (c) {
		if (c->layer < t->layer) {
			next = next_skipping(dir, c);
			subtree_free(t, c);
			c = next;
		} else if (c->first_child) {
			c = c->first_child;
		} else {
			c = next_skipping(dir, c);
		}
	}
	return 0;
}

/* ---- inode contents --------------------------------------------------------- */

int image_inode_set_symlink(struct image_inode *ino, const char *target)
{
	size_t len;
	char *s;

	if (!ino || !target || !S_ISLNK(ino->attr.mode))
		return -EINVAL;
	len = strlen(target);
	if (len == 0)
		return -EINVAL;
	if (len > IDX_SYMLINK_MAX)
		return -ENAMETOOLONG;
	s = strdup(target);
	if (!s)
		return -ENOMEM;
	free(ino->symlink);
	ino->symlink = s;
	return 0;
}

void image_inode_set_size(struct image_inode *ino, uint64_t size)
{
	ino->size = size;
}

int image_inode_set_xattr(struct image_inode *ino, const char *name, const void *value,
                          size_t len)
{
	struct tree_xattr *x;
	size_t nlen;
	char *n;
	void *v;
	uint32_t i;

	if (!ino || !name || (!value && len))
		return -EINVAL;
	nlen = strlen(name);
	if (nlen == 0)
		return -EINVAL;
	if (nlen > IDX_XATTR_NAME_MAX)
		return -ERANGE;
	if (len > IDX_XATTR_VALUE_MAX)
		return -E2BIG;
	v = malloc(len ? len : 1);
	if (!v)
		return -ENOMEM;
	if (len)
		memcpy(v, value, len);
	for (i = 0; i < ino->n_xattrs; i++)
		if (strcmp(ino->xattrs[i].name, name) == 0) {
			free(ino->xattrs[i].value);
			ino->xattrs[i].value = v;
			ino->xattrs[i].len = len;
			return 0;
		}
	if (ino->n_xattrs >= UINT16_MAX) {
		free(v);
		return -ENOSPC;
	}
	n = strdup(name);
	x = reallocarray(ino->xattrs, ino->n_xattrs + 1, sizeof(*x));
	if (!n || !x) {
		if (x)
			ino->xattrs = x;
		free(n);
		free(v);
		return -ENOMEM;
	}
	ino->xattrs = x;
	x[ino->n_xattrs++] = (struct tree_xattr){ .name = n, .value = v, .len = len };
	return 0;
}

int image_inode_add_extent(struct image_inode *ino, uint64_t file_off, uint32_t chunk,
                           uint32_t chunk_off, uint32_t len)
{
	struct image_extent *e;
	uint32_t cap;

	if (!ino || !S_ISREG(ino->attr.mode) || len == 0 || chunk == IMAGE_CHUNK_NONE ||
	    file_off > UINT64_MAX - len)
		return -EINVAL;
	if (ino->n_extents > 0) {
		e = &ino->extents[ino->n_extents - 1];
		if (file_off < e->file_off + e->len)
			return -EINVAL;
	}
	if (ino->n_extents == ino->cap_extents) {
		if (ino->cap_extents >= UINT32_MAX / 2)
			return -ENOSPC;
		cap = ino->cap_extents ? ino->cap_extents * 2 : 1;
		e = reallocarray(ino->extents, cap, sizeof(*e));
		if (!e)
			return -ENOMEM;
		ino->extents = e;
		ino->cap_extents = cap;
	}
	ino->extents[ino->n_extents++] = (struct image_extent){
		.file_off = file_off, .chunk = chunk, .chunk_off = chunk_off, .len = len,
	};
	return 0;
}

void image_inode_clear_extents(struct image_inode *ino)
{
	ino->n_extents = 0;
}

const struct image_attr *image_inode_attr(const struct image_inode *ino)
{
	return &ino->attr;
}

/* ---- chunks and config ------------------------------------------------------ */

int64_t image_tree_new_chunk(struct image_tree *t)
{
	struct tree_chunk *c;
	uint32_t cap;

	if (t->n_chunks == t->cap_chunks) {
		if (t->cap_chunks >= IMAGE_CHUNK_NONE / 2)
			return -ENOSPC;
		cap = t->cap_chunks ? t->cap_chunks * 2 : 64;
		c = reallocarray(t->chunks, cap, sizeof(*c));
		if (!c)
			return -ENOMEM;
		t->chunks = c;
		t->cap_chunks = cap;
	}
	memset(&t->chunks[t->n_chunks], 0, sizeof(*t->chunks));
	return t->n_chunks++;
}

int image_tree_set_chunk(struct image_tree *t, uint32_t idx, const struct image_chunk *c)
{
	if (!c)
		return -EINVAL;
	if (idx >= t->n_chunks)
		return -ERANGE;
	t->chunks[idx].c = *c;
	t->chunks[idx].set = true;
	return 0;
}

int image_tree_set_config(struct image_tree *t, const void *json, size_t len)
{
	void *p = NULL;

	if (!json && len)
		return -EINVAL;
	if (len) {
		p = malloc(len);
		if (!p)
			return -ENOMEM;
		memcpy(p, json, len);
	}
	free(t->config);
	t->config = p;
	t->config_len = len;
	return 0;
}
