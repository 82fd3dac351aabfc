/*
 * writer.c — serialise an image tree into the index format of FORMAT.md.
 *
 * Inodes are numbered breadth-first from the root, each directory's children
 * in name order, a hard-linked inode at its first entry; so every directory's
 * entries are one sorted run of the dirent table, and the same tree always
 * gives the same bytes.  Names, symlink targets and xattr names and values
 * share one deduplicated string table.  Chunk slots that no extent uses are
 * dropped and slots with one name are merged, with extents remapped.
 *
 * Cost: O(n log n) for the per-directory sorts, O(n) otherwise; memory is a
 * few pointers per entry beside the output.
 */
#include <limits.h>
#include <sys/stat.h>

#include "image/image-internal.h"

/* Deduplicating string table: open addressing over (offset, length). */
struct strtab {
	struct buf data;
	struct { uint32_t off, len; uint64_t hash; } *slots;
	size_t size, count;     /* size is a power of two; 0 offset+len means empty */
	uint8_t *used;
};

struct wctx {
	struct image_tree *t;
	struct image_inode **inodes;    /* by inode number - 1 */
	struct tree_node **dirs;        /* the node of each directory, numbering order */
	uint64_t *dir_first;            /* dirent run of each inode that is a directory */
	uint32_t *dir_subdirs;
	struct tree_node **dirents;
	uint64_t n_inodes, n_dirs, n_dirents;
	uint32_t *chunk_map;            /* slot -> chunk table index */
	uint32_t *chunk_slots;          /* chunk table index -> first slot */
	uint32_t n_chunks;
	uint64_t n_extents, n_xattrs;
	struct strtab str;
};

static int strtab_grow(struct strtab *s)
{
	size_t nsize = s->size ? s->size * 2 : 4096, i, j;
	__typeof__(s->slots) ns;
	uint8_t *nu;

	ns = calloc(nsize, sizeof(*ns));
	nu = calloc(nsize, 1);
	if (!ns || !nu) {
		free(ns);
		free(nu);
		return -ENOMEM;
	}
	for (i = 0; i < s->size; i++) {
		if (!s->used[i])
			continue;
		for (j = s->slots[i].hash & (nsize - 1); nu[j]; j = (j + 1) & (nsize - 1))
			;
		ns[j] = s->slots[i];
		nu[j] = 1;
	}
	free(s->slots);
	free(s->used);
	s->slots = ns;
	s->used = nu;
	s->size = nsize;
	return 0;
}

/* Offset of bytes p[0..len) in the string table, added when new. */
static int strtab_add(struct strtab *s, const void *p, size_t len, uint32_t *ret_off)
{
	uint64_t h;
	size_t i;
	int r;

	if (len > UINT32_MAX)
		return -EFBIG;
	if (2 * (s->count + 1) > s->size) {
		r = strtab_grow(s);
		if (r < 0)
			return r;
	}
	h = hash64(p, len);
	for (i = h & (s->size - 1); s->used[i]; i = (i + 1) & (s->size - 1))
		if (s->slots[i].hash == h && s->slots[i].len == len &&
		    memcmp(s->data.data + s->slots[i].off, p, len) == 0) {
			*ret_off = s->slots[i].off;
			return 0;
		}
	if (s->data.len + len > UINT32_MAX)
		return -EFBIG;
	*ret_off = (uint32_t)s->data.len;
	r = buf_append(&s->data, p, len);
	if (r < 0)
		return r;
	s->slots[i].off = *ret_off;
	s->slots[i].len = (uint32_t)len;
	s->slots[i].hash = h;
	s->used[i] = 1;
	s->count++;
	return 0;
}

static void wctx_free(struct wctx *w)
{
	free(w->inodes);
	free(w->dirs);
	free(w->dir_first);
	free(w->dir_subdirs);
	free(w->dirents);
	free(w->chunk_map);
	free(w->chunk_slots);
	buf_free(&w->str.data);
	free(w->str.slots);
	free(w->str.used);
}

static int node_cmp(const void *a, const void *b)
{
	const struct tree_node *x = *(struct tree_node *const *)a;
	const struct tree_node *y = *(struct tree_node *const *)b;

	return image_name_cmp(x->name, x->name_len, y->name, y->name_len);
}

static int xattr_cmp(const void *a, const void *b)
{
	const struct tree_xattr *x = a, *y = b;

	return image_name_cmp(x->name, strlen(x->name), y->name, strlen(y->name));
}

/* Number the inodes breadth-first and lay out every directory's sorted run. */
static int number_inodes(struct wctx *w)
{
	struct image_tree *t = w->t;
	uint64_t n = t->n_nodes, qi, first, ino;
	struct tree_node *dir, *c;
	struct image_inode *ci;

	if (n >= UINT32_MAX)
		return -EFBIG;
	w->inodes = calloc(n, sizeof(*w->inodes));
	w->dirs = calloc(n, sizeof(*w->dirs));
	w->dir_first = calloc(n, sizeof(*w->dir_first));
	w->dir_subdirs = calloc(n, sizeof(*w->dir_subdirs));
	w->dirents = calloc(n, sizeof(*w->dirents));
	if (!w->inodes || !w->dirs || !w->dir_first || !w->dir_subdirs || !w->dirents)
		return -ENOMEM;

	t->write_epoch++;
	t->root->inode->write_epoch = t->write_epoch;
	t->root->inode->write_ino = 1;
	w->inodes[w->n_inodes++] = t->root->inode;
	w->dirs[w->n_dirs++] = t->root;

	for (qi = 0; qi < w->n_dirs; qi++) {
		dir = w->dirs[qi];
		ino = dir->inode->write_ino;
		first = w->n_dirents;
		for (c = dir->first_child; c; c = c->next)
			w->dirents[w->n_dirents++] = c;
		qsort(w->dirents + first, w->n_dirents - first, sizeof(*w->dirents), node_cmp);
		w->dir_first[ino - 1] = first;
		for (uint64_t i = first; i < w->n_dirents; i++) {
			ci = w->dirents[i]->inode;
			if (ci->write_epoch == t->write_epoch)
				continue;
			ci->write_epoch = t->write_epoch;
			ci->write_ino = (uint32_t)++w->n_inodes;
			w->inodes[w->n_inodes - 1] = ci;
			if (S_ISDIR(ci->attr.mode)) {
				w->dirs[w->n_dirs++] = w->dirents[i];
				w->dir_subdirs[ino - 1]++;
			}
		}
	}
	return 0;
}

/* Check every extent against its chunk slot and its file, then give each
 * distinct referenced chunk name one table index, in slot order. */
static int map_chunks(struct wctx *w)
{
	struct image_tree *t = w->t;
	struct tree_chunk *s;
	uint32_t *htab = NULL, hsize = 64, i, j;
	uint64_t k, e, end;
	struct image_inode *ino;
	struct image_extent *x;
	int r = 0;

	w->chunk_map = malloc((t->n_chunks ? t->n_chunks : 1) * sizeof(*w->chunk_map));
	w->chunk_slots = malloc((t->n_chunks ? t->n_chunks : 1) * sizeof(*w->chunk_slots));
	if (!w->chunk_map || !w->chunk_slots)
		return -ENOMEM;
	for (i = 0; i < t->n_chunks; i++)
		w->chunk_map[i] = IMAGE_CHUNK_NONE;

	for (k = 0; k < w->n_inodes; k++) {
		ino = w->inodes[k];
		if (S_ISLNK(ino->attr.mode) && !ino->symlink)
			return -EINVAL;
		w->n_xattrs += ino->n_xattrs;
		if (!S_ISREG(ino->attr.mode))
			continue;
		w->n_extents += ino->n_extents;
		for (e = 0; e < ino->n_extents; e++) {
			x = &ino->extents[e];
			if (x->chunk >= t->n_chunks || !t->chunks[x->chunk].set)
				return -EINVAL;
			end = x->file_off + x->len;
			if (end > ino->size ||
			    (uint64_t)x->chunk_off + x->len > t->chunks[x->chunk].c.size)
				return -EINVAL;
			w->chunk_map[x->chunk] = 0;
		}
	}
	if (w->n_xattrs > UINT32_MAX)
		return -EFBIG;

	while (hsize < 2 * (uint64_t)t->n_chunks)
		hsize *= 2;
	htab = malloc(hsize * sizeof(*htab));
	if (!htab)
		return -ENOMEM;
	memset(htab, 0xff, hsize * sizeof(*htab));
	for (i = 0; i < t->n_chunks; i++) {
		if (w->chunk_map[i] == IMAGE_CHUNK_NONE)
			continue;
		s = &t->chunks[i];
		for (j = (uint32_t)hash64(s->c.name, 16) & (hsize - 1); htab[j] != UINT32_MAX;
		     j = (j + 1) & (hsize - 1))
			if (memcmp(t->chunks[w->chunk_slots[htab[j]]].c.name, s->c.name, 16) == 0)
				break;
		if (htab[j] == UINT32_MAX) {
			htab[j] = w->n_chunks;
			w->chunk_slots[w->n_chunks++] = i;
		} else if (t->chunks[w->chunk_slots[htab[j]]].c.size != s->c.size) {
			/* one name, two sizes: the caller hashed wrongly */
			r = -EINVAL;
			break;
		}
		w->chunk_map[i] = htab[j];
	}
	free(htab);
	return r;
}

static uint64_t align8(uint64_t v)
{
	return (v + 7) & ~(uint64_t)7;
}

static void put_section(uint8_t *h, enum idx_section s, uint64_t off, uint64_t len, uint64_t count)
{
	uint8_t *p = h + IDX_H_SECTIONS + (size_t)s * IDX_SECTION_SIZE;

	put_le64(p, off);
	put_le64(p + 8, len);
	put_le64(p + 16, count);
}

/* Fill the record sections (already zeroed at base) and the string table. */
static int write_records(struct wctx *w, uint8_t *base, const uint64_t *off,
                         uint64_t *ret_file_bytes, uint64_t *ret_data, uint64_t *ret_stored)
{
	struct image_tree *t = w->t;
	uint64_t k, e, ext = 0, xat = 0, blocks_bytes, file_bytes = 0, data = 0, stored = 0;
	struct image_inode *ino;
	struct tree_node *d;
	struct tree_chunk *c;
	uint32_t so, vo, nlink, i;
	uint8_t *p;
	int r;

	for (k = 0; k < w->n_dirents; k++) {
		d = w->dirents[k];
		r = strtab_add(&w->str, d->name, d->name_len, &so);
		if (r < 0)
			return r;
		p = base + off[IDX_S_DIRENTS] + k * IDX_DIRENT_SIZE;
		put_le32(p + IDX_D_NAME_OFF, so);
		put_le32(p + IDX_D_INO, d->inode->write_ino);
		put_le16(p + IDX_D_NAME_LEN, d->name_len);
	}

	for (k = 0; k < w->n_inodes; k++) {
		ino = w->inodes[k];
		p = base + off[IDX_S_INODES] + k * IDX_INODE_SIZE;
		nlink = S_ISDIR(ino->attr.mode) ? 2 + w->dir_subdirs[k] : ino->refs - 1;
		put_le32(p + IDX_I_MODE, ino->attr.mode);
		put_le32(p + IDX_I_UID, ino->attr.uid);
		put_le32(p + IDX_I_GID, ino->attr.gid);
		put_le32(p + IDX_I_NLINK, nlink);
		put_le64(p + IDX_I_MTIME_SEC, (uint64_t)ino->attr.mtime_sec);
		put_le32(p + IDX_I_MTIME_NSEC, ino->attr.mtime_nsec);
		if (S_ISCHR(ino->attr.mode) || S_ISBLK(ino->attr.mode))
			put_le64(p + IDX_I_RDEV, ino->attr.rdev);

		if (S_ISDIR(ino->attr.mode)) {
			put_le64(p + IDX_I_SIZE, IDX_DIR_SIZE);
			put_le64(p + IDX_I_DATA_FIRST, w->dir_first[k]);
		} else if (S_ISREG(ino->attr.mode)) {
			blocks_bytes = 0;
			for (e = 0; e < ino->n_extents; e++) {
				uint8_t *q = base + off[IDX_S_EXTENTS] + (ext + e) * IDX_EXTENT_SIZE;
				struct image_extent *x = &ino->extents[e];

				put_le64(q + IDX_E_FILE_OFF, x->file_off);
				put_le32(q + IDX_E_CHUNK, w->chunk_map[x->chunk]);
				put_le32(q + IDX_E_CHUNK_OFF, x->chunk_off);
				put_le32(q + IDX_E_LEN, x->len);
				blocks_bytes += x->len;
			}
			put_le64(p + IDX_I_SIZE, ino->size);
			put_le64(p + IDX_I_BLOCKS, (blocks_bytes + 511) / 512);
			put_le64(p + IDX_I_DATA_FIRST, ext);
			put_le32(p + IDX_I_DATA_COUNT, ino->n_extents);
			ext += ino->n_extents;
			file_bytes += ino->size;
		} else if (S_ISLNK(ino->attr.mode)) {
			size_t len = strlen(ino->symlink);

			r = strtab_add(&w->str, ino->symlink, len, &so);
			if (r < 0)
				return r;
			put_le64(p + IDX_I_SIZE, len);
			put_le64(p + IDX_I_DATA_FIRST, so);
			put_le32(p + IDX_I_DATA_COUNT, (uint32_t)len);
		}

		if (ino->n_xattrs)
			qsort(ino->xattrs, ino->n_xattrs, sizeof(*ino->xattrs), xattr_cmp);
		put_le32(p + IDX_I_XATTR_FIRST, (uint32_t)xat);
		put_le32(p + IDX_I_XATTR_COUNT, ino->n_xattrs);
		for (i = 0; i < ino->n_xattrs; i++) {
			struct tree_xattr *x = &ino->xattrs[i];
			uint8_t *q = base + off[IDX_S_XATTRS] + (xat + i) * IDX_XATTR_SIZE;
			size_t nl = strlen(x->name);

			r = strtab_add(&w->str, x->name, nl, &so);
			if (r < 0)
				return r;
			r = strtab_add(&w->str, x->value, x->len, &vo);
			if (r < 0)
				return r;
			put_le32(q + IDX_X_NAME_OFF, so);
			put_le32(q + IDX_X_VALUE_OFF, vo);
			put_le32(q + IDX_X_NAME_LEN, (uint32_t)nl);
			put_le32(q + IDX_X_VALUE_LEN, (uint32_t)x->len);
		}
		xat += ino->n_xattrs;
	}
	/* a directory's run length is its entry count */
	for (k = 0; k < w->n_dirs; k++) {
		d = w->dirs[k];
		p = base + off[IDX_S_INODES] + (uint64_t)(d->inode->write_ino - 1) * IDX_INODE_SIZE;
		put_le32(p + IDX_I_DATA_COUNT, d->n_children);
	}

	for (i = 0; i < w->n_chunks; i++) {
		c = &t->chunks[w->chunk_slots[i]];
		p = base + off[IDX_S_CHUNKS] + (uint64_t)i * IDX_CHUNK_SIZE;
		memcpy(p + IDX_C_NAME, c->c.name, 16);
		put_le32(p + IDX_C_SIZE, c->c.size);
		put_le32(p + IDX_C_STORED_SIZE, c->c.stored_size);
		put_le32(p + IDX_C_FLAGS, c->c.flags);
		data += c->c.size;
		stored += c->c.stored_size;
	}
	*ret_file_bytes = file_bytes;
	*ret_data = data;
	*ret_stored = stored;
	return 0;
}

int image_write(struct image_tree *t, struct buf *out)
{
	struct wctx w = { .t = t };
	uint64_t off[IDX_S_COUNT], len[IDX_S_COUNT], count[IDX_S_COUNT], pos, total;
	uint64_t file_bytes, data, stored;
	size_t start = out->len;
	uint8_t *base;
	int r, s;

	r = number_inodes(&w);
	if (r < 0)
		goto fail;
	r = map_chunks(&w);
	if (r < 0)
		goto fail;

	count[IDX_S_INODES] = w.n_inodes;
	count[IDX_S_DIRENTS] = w.n_dirents;
	count[IDX_S_EXTENTS] = w.n_extents;
	count[IDX_S_XATTRS] = w.n_xattrs;
	count[IDX_S_CHUNKS] = w.n_chunks;
	len[IDX_S_INODES] = w.n_inodes * IDX_INODE_SIZE;
	len[IDX_S_DIRENTS] = w.n_dirents * IDX_DIRENT_SIZE;
	len[IDX_S_EXTENTS] = w.n_extents * IDX_EXTENT_SIZE;
	len[IDX_S_XATTRS] = w.n_xattrs * IDX_XATTR_SIZE;
	len[IDX_S_CHUNKS] = (uint64_t)w.n_chunks * IDX_CHUNK_SIZE;
	pos = IDX_HEADER_SIZE;
	for (s = 0; s <= IDX_S_CHUNKS; s++) {
		off[s] = pos;
		pos = align8(pos + len[s]);
	}

	/* Records go straight into out; the string table grows beside them and
	 * is appended once its size is known. */
	r = buf_append_zero(out, pos);
	if (r < 0)
		goto fail;
	base = out->data + start;
	r = write_records(&w, base, off, &file_bytes, &data, &stored);
	if (r < 0)
		goto fail;

	off[IDX_S_STRINGS] = pos;
	len[IDX_S_STRINGS] = count[IDX_S_STRINGS] = w.str.data.len;
	pos = align8(pos + w.str.data.len);
	off[IDX_S_CONFIG] = pos;
	len[IDX_S_CONFIG] = count[IDX_S_CONFIG] = t->config_len;
	total = align8(pos + t->config_len);
	r = buf_append_zero(out, total - off[IDX_S_STRINGS]);
	if (r < 0)
		goto fail;
	base = out->data + start;
	if (w.str.data.len)
		memcpy(base + off[IDX_S_STRINGS], w.str.data.data, w.str.data.len);
	if (t->config_len)
		memcpy(base + off[IDX_S_CONFIG], t->config, t->config_len);

	memcpy(base + IDX_H_MAGIC, IDX_MAGIC, IDX_MAGIC_LEN);
	put_le32(base + IDX_H_VERSION, IDX_VERSION);
	put_le32(base + IDX_H_FLAGS, 0);
	put_le32(base + IDX_H_HEADER_SIZE, IDX_HEADER_SIZE);
	put_le32(base + IDX_H_SECTION_COUNT, IDX_S_COUNT);
	put_le64(base + IDX_H_TOTAL_SIZE, total);
	put_le64(base + IDX_H_FILE_BYTES, file_bytes);
	put_le64(base + IDX_H_DATA_BYTES, data);
	put_le64(base + IDX_H_STORED_BYTES, stored);
	for (s = 0; s < IDX_S_COUNT; s++)
		put_section(base, s, off[s], len[s], count[s]);
	put_le64(base + IDX_H_CHECKSUM,
	         hash64(base + IDX_CHECKSUM_START, total - IDX_CHECKSUM_START));
	wctx_free(&w);
	return 0;

fail:
	if (out->len > start) {
		out->len = start;
		if (out->data)
			out->data[start] = 0;
	}
	wctx_free(&w);
	return r;
}
