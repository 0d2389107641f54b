/* /proc/self/mountinfo, parsed once here for every reader: the cgroup id
 * cache (cgroup_id.c), takana.cgroup.mounts and probe's /proc section.
 *
 * A line (proc(5)): id parent major:minor root mount-point options
 * [optional fields...] - fstype source super-options, separated by single
 * spaces; the kernel escapes space, tab, newline and backslash in paths as
 * \ooo, so " - " only ever appears as the separator. */
#define _GNU_SOURCE
#include "mountinfo.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util.h"

/* Far more than any host mounts; a bound on what one read keeps. */
#define MOUNTINFO_MAX (64u << 20)

/* mountinfo escapes space, tab, newline and backslash as \ooo. */
static void unescape(char *s)
{
	char *out = s;

	for (; *s; s++) {
		if (s[0] == '\\' && s[1] >= '0' && s[1] <= '7' && s[2] >= '0' && s[2] <= '7' &&
		    s[3] >= '0' && s[3] <= '7') {
			*out++ = (char)((s[1] - '0') * 64 + (s[2] - '0') * 8 + (s[3] - '0'));
			s += 3;
		} else {
			*out++ = *s;
		}
	}
	*out = '\0';
}

/* Cuts the field at *p (up to a space or the end of the line), NUL-ends it
 * and moves *p past its space: the field, or NULL when it is empty. */
static char *field(char **p)
{
	char *f = *p, *sp = strchr(f, ' ');

	if (sp != NULL) {
		*sp = '\0';
		*p = sp + 1;
	} else {
		*p = f + strlen(f);
	}
	return *f ? f : NULL;
}

static int parse_line(char *line, struct tk_mount *m)
{
	char *dash = strstr(line, " - "), *p = line, *root, *point;

	if (dash == NULL)
		return -1;
	*dash = '\0';
	for (int i = 0; i < 3; i++) {
		if (field(&p) == NULL)
			return -1;
	}
	root = field(&p);
	point = field(&p);
	/* The mount options follow the mount point: a line that ends there
	 * has lost a field. */
	if (root == NULL || point == NULL || field(&p) == NULL)
		return -1;
	p = dash + 3;
	m->fstype = field(&p);
	if (m->fstype == NULL || field(&p) == NULL || (m->options = field(&p)) == NULL)
		return -1;
	unescape(root);
	unescape(point);
	m->root = root;
	m->point = point;
	return 0;
}

int tk_mountinfo_parse(char *text, size_t len, tk_mount_cb cb, void *ctx)
{
	char *end = text + len, *line = text;

	while (line < end) {
		char *nl = memchr(line, '\n', (size_t)(end - line));
		char *le = nl ? nl : end;
		struct tk_mount m;
		int r;

		/* A NUL inside a line ends it early: what follows is lost, as a
		 * C string reader of the file would lose it. */
		if (le < end)
			*le = '\0';
		if (nl == NULL) {
			/* The last line without a newline: copy it to end in NUL. */
			char *copy = strndup(line, (size_t)(end - line));

			if (copy == NULL)
				return -ENOMEM;
			r = parse_line(copy, &m) == 0 ? cb(ctx, &m) : 0;
			free(copy);
			return r;
		}
		r = parse_line(line, &m) == 0 ? cb(ctx, &m) : 0;
		if (r != 0)
			return r;
		line = le + 1;
	}
	return 0;
}

static ssize_t read_mountinfo(char **text)
{
	return tk_read_all(AT_FDCWD, "/proc/self/mountinfo", MOUNTINFO_MAX, text);
}

int tk_mountinfo_each(tk_mount_cb cb, void *ctx)
{
	char *text;
	ssize_t n = read_mountinfo(&text);
	int r;

	if (n < 0)
		return (int)n;
	r = tk_mountinfo_parse(text, (size_t)n, cb, ctx);
	free(text);
	return r;
}

/* ---- cgroup mounts ---------------------------------------------------------- */

void tk_cgroup_mounts_free(struct tk_cgroup_mounts *m)
{
	for (size_t i = 0; i < m->nv1; i++) {
		free(m->v1[i].ctrl);
		free(m->v1[i].point);
	}
	free(m->v1);
	free(m->v2);
	free(m->v2_root);
	memset(m, 0, sizeof *m);
}

static int set_v2(struct tk_cgroup_mounts *c, const struct tk_mount *m)
{
	char *point = strdup(m->point), *root = strdup(m->root);

	if (point == NULL || root == NULL) {
		free(point);
		free(root);
		return -ENOMEM;
	}
	free(c->v2);
	free(c->v2_root);
	c->v2 = point;
	c->v2_root = root;
	return 0;
}

static int add_v1(struct tk_cgroup_mounts *c, const char *ctrl, size_t n, const char *point)
{
	struct tk_cgroup_v1 *v;

	for (size_t i = 0; i < c->nv1; i++) {
		if (strncmp(c->v1[i].ctrl, ctrl, n) == 0 && c->v1[i].ctrl[n] == '\0')
			return 0;
	}
	v = tk_grow(c->v1, &c->v1_cap, c->nv1 + 1, sizeof *v, 16);
	if (v == NULL)
		return -ENOMEM;
	c->v1 = v;
	v = &c->v1[c->nv1];
	v->ctrl = strndup(ctrl, n);
	v->point = strdup(point);
	if (v->ctrl == NULL || v->point == NULL) {
		free(v->ctrl);
		free(v->point);
		return -ENOMEM;
	}
	c->nv1++;
	return 0;
}

static int cgroup_mount(void *ctx, const struct tk_mount *m)
{
	struct tk_cgroup_mounts *c = ctx;

	if (strcmp(m->fstype, "cgroup2") == 0) {
		if (c->v2 == NULL || (strcmp(c->v2_root, "/") != 0 && strcmp(m->root, "/") == 0))
			return set_v2(c, m);
		return 0;
	}
	if (strcmp(m->fstype, "cgroup") != 0)
		return 0;
	for (const char *o = m->options; *o;) {
		size_t n = strcspn(o, ",");

		if (n > 0 && !(n == 2 && (memcmp(o, "rw", 2) == 0 || memcmp(o, "ro", 2) == 0)) &&
		    memchr(o, '=', n) == NULL) {
			int r = add_v1(c, o, n, m->point);

			if (r < 0)
				return r;
		}
		o += n + (o[n] == ',');
	}
	return 0;
}

int tk_cgroup_mounts_parse(char *text, size_t len, struct tk_cgroup_mounts *out)
{
	int r;

	memset(out, 0, sizeof *out);
	r = tk_mountinfo_parse(text, len, cgroup_mount, out);
	if (r < 0)
		tk_cgroup_mounts_free(out);
	return r;
}

int tk_cgroup_mounts_read(struct tk_cgroup_mounts *out)
{
	char *text;
	ssize_t n = read_mountinfo(&text);
	int r;

	memset(out, 0, sizeof *out);
	if (n < 0)
		return (int)n;
	r = tk_cgroup_mounts_parse(text, (size_t)n, out);
	free(text);
	return r;
}

/* ---- /proc ------------------------------------------------------------------ */

struct hidepid {
	char *out;
	size_t cap;
	int found;
};

static int proc_mount(void *ctx, const struct tk_mount *m)
{
	struct hidepid *h = ctx;

	if (strcmp(m->point, "/proc") != 0 || strcmp(m->fstype, "proc") != 0)
		return 0;
	/* The last /proc mount is the one this process sees. */
	h->found = 0;
	for (const char *o = m->options; *o;) {
		size_t n = strcspn(o, ",");

		if (n > 8 && memcmp(o, "hidepid=", 8) == 0) {
			if (n - 8 >= h->cap)
				return -ENAMETOOLONG;
			memcpy(h->out, o + 8, n - 8);
			h->out[n - 8] = '\0';
			h->found = 1;
			break;
		}
		o += n + (o[n] == ',');
	}
	return 0;
}

int tk_proc_hidepid_parse(char *text, size_t len, char *out, size_t cap)
{
	struct hidepid h = { out, cap, 0 };
	int r = tk_mountinfo_parse(text, len, proc_mount, &h);

	return r < 0 ? r : h.found;
}

int tk_proc_hidepid(char *out, size_t cap)
{
	char *text;
	ssize_t n = read_mountinfo(&text);
	int r;

	if (n < 0)
		return (int)n;
	r = tk_proc_hidepid_parse(text, (size_t)n, out, cap);
	free(text);
	return r;
}
