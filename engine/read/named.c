/*
 * named.c: the walk over a set of named matrices (named.h): a JSON
 * object's keys, a .npz archive's members, a folder's files.  Only the
 * walking and the reading: the names' meaning and the messages about them
 * are the callers'.
 */
#include "read/named.h"
#include "read/input.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* a name a data format of mha's ends with: what a -w folder is read for */
static int data_file(const char *name)
{
	static const char *const known[] = { "json", "csv", "tsv", "txt", "npy" };
	const char *dot = strrchr(name, '.');

	for (size_t i = 0; dot && i < sizeof(known) / sizeof(known[0]); i++)
		if (!strcmp(dot + 1, known[i]))
			return 1;
	return 0;
}

int named_dir(named_set *s, const char *dir, unsigned flags)
{
	const size_t n = strlen(dir);
	const char *join = (flags & NAMED_JOIN_ONCE) && n && dir[n - 1] == '/' ? "" : "/";

	memset(s, 0, sizeof(*s));
	s->kind = NAMED_DIR;
	s->path = dir;
	if (files_list_dir(dir, flags & NAMED_DATA_FILES ? data_file : NULL, &s->files, &s->n_files))
		return -1;
	s->paths = calloc(s->n_files ? s->n_files : 1, sizeof(*s->paths));
	for (size_t i = 0; s->paths && i < s->n_files; i++) {
		const size_t size = n + strlen(join) + strlen(s->files[i]) + 1;

		if (!(s->paths[i] = malloc(size))) {
			errno = ENOMEM;
			return -1;
		}
		snprintf(s->paths[i], size, "%s%s%s", dir, join, s->files[i]);
	}
	if (!s->paths) {
		errno = ENOMEM;
		return -1;
	}
	return 0;
}

int named_file(named_set *s, const char *path)
{
	memset(s, 0, sizeof(*s));
	s->path = path;
	if (input_load(&s->in, path))
		return -1;
	switch (input_format(&s->in)) {
	case FORMAT_IN_NPZ:
		s->kind = NAMED_NPZ;
		return npz_open(&s->z, &s->in);
	case FORMAT_IN_PICKLE:
		return refuse_pickle(s->in.name);
	case FORMAT_IN_JSON:
		if (json_parse(&s->doc, &s->in))
			return -1;
		s->kind = cJSON_IsObject(s->doc.root) ? NAMED_JSON : NAMED_VALUE;
		s->node = s->kind == NAMED_JSON ? s->doc.root->child : NULL;
		return 0;
	default:
		s->kind = NAMED_OTHER;
		return 0;
	}
}

size_t named_count(const named_set *s)
{
	size_t n = 0;

	switch (s->kind) {
	case NAMED_DIR:
		return s->n_files;
	case NAMED_NPZ:
		return s->z ? npz_count(s->z) : 0;
	case NAMED_JSON:
		for (const cJSON *e = s->doc.root->child; e; e = e->next)
			n++;
		return n;
	default:
		return 0;
	}
}

int named_next(named_set *s, named_entry *e)
{
	memset(e, 0, sizeof(*e));
	switch (s->kind) {
	case NAMED_DIR: {
		char *dot;

		if (s->next >= s->n_files || !s->paths || !s->paths[s->next])
			return 0; /* the end, or a listing named_dir() could not finish */
		e->file = s->files[s->next];
		e->path = s->paths[s->next++];
		snprintf(s->stem, sizeof(s->stem), "%s", e->file);
		if ((dot = strrchr(s->stem, '.')) != NULL)
			*dot = '\0';
		e->name = s->stem;
		return 1;
	}
	case NAMED_NPZ:
		if (!s->z || s->next >= npz_count(s->z))
			return 0;
		e->name = npz_name(s->z, s->next++);
		return 1;
	case NAMED_JSON:
		if (!s->node)
			return 0;
		e->node = s->node;
		e->name = s->node->string;
		s->node = s->node->next;
		return 1;
	default:
		return 0;
	}
}

int named_read(const named_set *s, const named_entry *e, matrix *m, const read_spec *spec)
{
	switch (s->kind) {
	case NAMED_DIR: {
		read_spec found = *spec;

		/* mha found the file, the user did not name it: a regular file only */
		found.flags |= READ_FOUND;
		return read_matrix(m, e->path, &found);
	}
	case NAMED_NPZ:
		return npz_read(s->z, e->name, m, spec);
	case NAMED_JSON:
		return json_node_matrix(m, &s->doc, e->node, e->name, spec->what, spec->min_rank,
					spec->max_rank, spec->flags);
	default:
		return -1;
	}
}

void named_close(named_set *s)
{
	if (!s)
		return;
	files_list_free(s->files, s->n_files);
	for (size_t i = 0; s->paths && i < s->n_files; i++)
		free(s->paths[i]);
	free(s->paths);
	npz_close(s->z); /* before the file whose bytes it refers to */
	json_doc_free(&s->doc);
	input_free(&s->in);
	memset(s, 0, sizeof(*s));
}
