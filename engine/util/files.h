/*
 * files.h: the files a run reads.  Every reader opens its file with
 * files_open(), which learns the file's kind before anything can block and
 * remembers it, by device and inode, in one list for the whole run; an
 * output (outfile.h) that leads to a file on that list is refused, under
 * whatever name it is given: ./x.json, a hard link, a symbolic link, or a
 * shard that an index names.  Not the reading itself (input.h) nor the
 * writing (outfile.h).
 */
#ifndef MHA_ENGINE_FILES_H
#define MHA_ENGINE_FILES_H

#include <stddef.h>

/* Where a file's name came from. */
enum file_origin {
	/* named by the user (-x, --mask, -w FILE): a FIFO, a pipe or a device
	 * is read as a stream, as the user meant */
	FILE_GIVEN,
	/* found by mha itself (an entry of a -w or --against folder, a shard an
	 * index names, config.json beside a checkpoint): a regular file only,
	 * since nobody is there to write to a FIFO and opening it would wait
	 * forever */
	FILE_FOUND,
	/* read in place at offsets (a safetensors file): a regular file only */
	FILE_SEEKABLE
};

/*
 * Open path (not "-") for reading: a path the user gave as a plain open
 * does (a FIFO waits for its writer), any other with O_NONBLOCK, so that a
 * FIFO cannot block before its kind is known; then a directory, or anything
 * but a regular file where origin asks for one, is refused in one line
 * naming path.  The file joins the run's inputs, for opt ("-x"; NULL when
 * the reader does not know the option).  The descriptor (blocking,
 * close-on-exec), or -1 said.
 */
int files_open(const char *path, enum file_origin origin, const char *opt);

/* path ("-": standard input) is read for opt: remember it now, before
 * reading, so that -o naming it is refused up front.  -1 only when out of
 * memory (said). */
int files_note(const char *opt, const char *path);
/* The same for a descriptor already open (standard input). */
int files_note_fd(const char *opt, const char *path, int fd);

/* -o path would replace one of the run's inputs: say which; -1.  Else 0. */
int files_refuse_output(const char *path);
/* -o dir/: the same for each file in dir that may_write(name, ctx) says
 * the run may write there (the first such clash by name, so the message
 * never varies). */
int files_refuse_output_in_dir(const char *dir, int (*may_write)(const char *name, void *ctx),
			       void *ctx);

/* path names a directory (stat follows links); "-", standard input or
 * output, never does. */
int is_dir(const char *path);

/*
 * The entries of the directory dir that keep(name) keeps (keep NULL: all),
 * but never a dot file, sorted by name (strcmp), so that what is read or
 * said first never varies with the file system: *names[*n], each and the
 * array from malloc(), the caller's to free (files_list_free).  0, or -1
 * with errno set and nothing said: dir cannot be read, or ENOMEM.
 */
int files_list_dir(const char *dir, int (*keep)(const char *name), char ***names, size_t *n);
void files_list_free(char **names, size_t n);

/* Forget every input (the fuzzers, between runs; the end of a run). */
void files_forget(void);

#endif
