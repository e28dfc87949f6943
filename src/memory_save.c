/*
 * memory_save.c
 *		The memory store's save file: a clean shutdown saves the live
 *		buckets to SAVE_FILE in the data directory, the next start loads
 *		them.  After a crash or an immediate shutdown the store starts empty,
 *		as the unlogged table does.
 *
 * Every start reads or removes the file, and loads it only when it was
 * written after the shutdown checkpoint the server starts from: a file left
 * from an earlier memory-store period (the server ran with the table store
 * since, maybe without the library loaded at all) holds buckets older than
 * what rl_buckets says now.
 *
 * Both run in the postmaster: at its exit every backend is gone, and at its
 * start none has begun.
 */
#include "postgres.h"

#include <sys/stat.h>
#include <unistd.h>

#include "access/xlog.h"
#include "catalog/pg_control.h"
#include "common/controldata_utils.h"
#include "common/file_perm.h"
#include "miscadmin.h"
#include "port/pg_crc32c.h"
#include "storage/fd.h"
#include "utils/timestamp.h"

#include "memory_store.h"

#define SAVE_FILE "ratelimit_buckets"
#define SAVE_FILE_TMP SAVE_FILE ".tmp"
#define SAVE_MAGIC 0x524c4231	/* "RLB1" */
/* 3: slots hold 1.3's lock; a file of version 2 is refused, never misread */
#define SAVE_VERSION 3

/* The save file: this header, count slots, and a CRC-32C of both. */
typedef struct SaveHeader
{
	uint32		magic;
	uint32		version;
	uint64		system_identifier;	/* a file of another cluster is refused */
	XLogRecPtr	checkpoint;		/* the shutdown checkpoint it was written after */
	uint32		slot_size;
	uint32		pg_major;		/* the layout of another major may differ */
	uint64		count;
} SaveHeader;

/*
 * Slots written or read at a time: the file is streamed through a buffer of
 * this size, whatever the size of the store.
 */
#define CHUNK_SLOTS 4096

/*
 * The most slots a save can hold, those of the largest store: a longer file
 * is refused before it is read.
 */
#define MAX_SAVED_SLOTS \
	((uint64) ((MEMORY_BUCKETS_MAX + SET_SLOTS - 1) / SET_SLOTS) * SET_SLOTS)

static void
save_failed(const char *what)
{
	ereport(LOG,
			(errcode_for_file_access(),
			 errmsg("could not %s \"%s\": %m", what, SAVE_FILE_TMP),
			 errdetail("The rate-limit buckets of the memory store are not saved; they start empty.")));
}

static inline bool
slot_saved(const MemorySlot *slot, int64 now)
{
	return slot->dboid != InvalidOid && !memory_slot_passed(slot, now);
}

/* Write the live slots to fd, CHUNK_SLOTS at most at a time, adding them to *crc. */
static bool
write_slots(int fd, MemoryStore *memory, int64 now, pg_crc32c *crc)
{
	MemorySlot *chunk = palloc(CHUNK_SLOTS * sizeof(MemorySlot));
	int			filled = 0;
	int			s;
	int			i;

	for (s = 0; s < memory->nsets; s++)
	{
		for (i = 0; i < SET_SLOTS; i++)
			if (slot_saved(&memory->sets[s].slots[i], now))
				chunk[filled++] = memory->sets[s].slots[i];

		/* written when the next set might not fit, and at the end */
		if (filled > CHUNK_SLOTS - SET_SLOTS || s == memory->nsets - 1)
		{
			size_t		bytes = filled * sizeof(MemorySlot);

			COMP_CRC32C(*crc, chunk, bytes);
			if (bytes > 0 && write(fd, chunk, bytes) != bytes)
			{
				pfree(chunk);
				return false;
			}
			filled = 0;
		}
	}
	pfree(chunk);
	return true;
}

/*
 * on_shmem_exit of the postmaster: save the live buckets, but only after a
 * clean shutdown.  An immediate shutdown also exits normally, so the control
 * file tells them apart: only a completed shutdown checkpoint marks it shut
 * down.  The store is read twice, to count its live buckets and to write
 * them: nothing changes it any more.
 */
void
memory_save_at_exit(int code, Datum arg)
{
	MemoryStore *memory = (MemoryStore *) DatumGetPointer(arg);
	ControlFileData *control;
	bool		crc_ok;
	SaveHeader	header = {0};
	int64		now = GetCurrentTimestamp();
	int			fd;
	int			s;
	int			i;
	pg_crc32c	crc;

	if (code != 0 || memory == NULL)
		return;
	control = get_controlfile(DataDir, &crc_ok);
	if (!crc_ok || control->state != DB_SHUTDOWNED)
		return;

	for (s = 0; s < memory->nsets; s++)
		for (i = 0; i < SET_SLOTS; i++)
			if (slot_saved(&memory->sets[s].slots[i], now))
				header.count++;
	header.magic = SAVE_MAGIC;
	header.version = SAVE_VERSION;
	header.system_identifier = control->system_identifier;
	header.checkpoint = control->checkPoint;
	header.slot_size = sizeof(MemorySlot);
	header.pg_major = PG_VERSION_NUM / 10000;

	fd = OpenTransientFilePerm(SAVE_FILE_TMP, O_WRONLY | O_CREAT | O_TRUNC | PG_BINARY,
							   pg_file_create_mode);
	if (fd < 0)
	{
		save_failed("create");
		return;
	}
	INIT_CRC32C(crc);
	COMP_CRC32C(crc, &header, sizeof(header));
	if (write(fd, &header, sizeof(header)) != sizeof(header) ||
		!write_slots(fd, memory, now, &crc))
	{
		save_failed("write");
		CloseTransientFile(fd);
		unlink(SAVE_FILE_TMP);
		return;
	}
	FIN_CRC32C(crc);
	if (write(fd, &crc, sizeof(crc)) != sizeof(crc) || pg_fsync(fd) != 0)
	{
		save_failed("write");
		CloseTransientFile(fd);
		unlink(SAVE_FILE_TMP);
		return;
	}
	CloseTransientFile(fd);
	(void) durable_rename(SAVE_FILE_TMP, SAVE_FILE, LOG);
}

static void
ignore_save_file(const char *reason)
{
	ereport(LOG,
			(errmsg("ratelimit: ignoring the saved buckets in \"%s\": %s",
					SAVE_FILE, reason),
			 errdetail("The memory store starts empty.")));
}

/*
 * Whether the server starts from the shutdown checkpoint that a save file
 * was written after: the control file is still as that shutdown left it.
 */
static bool
starts_from_checkpoint(XLogRecPtr checkpoint)
{
	bool		crc_ok;
	ControlFileData *control = get_controlfile(DataDir, &crc_ok);
	bool		starts = crc_ok && control->state == DB_SHUTDOWNED &&
		control->checkPoint == checkpoint;

	pfree(control);
	return starts;
}

/* Put a loaded bucket in its set; false when the set is full. */
static bool
place_loaded(MemoryStore *memory, const MemorySlot *loaded)
{
	MemorySet  *set = memory_set_of(memory, loaded->key, loaded->dboid);
	int			i;

	for (i = 0; i < SET_SLOTS; i++)
		if (set->slots[i].dboid == InvalidOid)
		{
			set->slots[i] = *loaded;
			return true;
		}
	return false;
}

/* Free every slot again: what was placed came from a file found damaged. */
static void
empty_store(MemoryStore *memory)
{
	int			s;

	for (s = 0; s < memory->nsets; s++)
		memset(memory->sets[s].slots, 0, sizeof(memory->sets[s].slots));
}

/*
 * Read count slots from fd, CHUNK_SLOTS at a time, adding them to *crc and
 * placing them in the store; *placed counts those that found a slot.
 */
static bool
read_slots(int fd, MemoryStore *memory, uint64 count, pg_crc32c *crc,
		   uint64 *placed)
{
	MemorySlot *chunk = palloc(CHUNK_SLOTS * sizeof(MemorySlot));

	while (count > 0)
	{
		int			n = (int) Min(count, CHUNK_SLOTS);
		int			i;

		if (read(fd, chunk, n * sizeof(MemorySlot)) != n * sizeof(MemorySlot))
		{
			pfree(chunk);
			return false;
		}
		COMP_CRC32C(*crc, chunk, n * sizeof(MemorySlot));
		for (i = 0; i < n; i++)
			if (chunk[i].dboid != InvalidOid && chunk[i].interval_us > 0 &&
				place_loaded(memory, &chunk[i]))
				(*placed)++;
		count -= n;
	}
	pfree(chunk);
	return true;
}

/*
 * Load the buckets a clean shutdown saved.  The file is removed first, so
 * that a crash later starts empty.  Anything that is not exactly a save file
 * of this cluster is logged and ignored; the file is streamed, placing the
 * buckets as they come, and a checksum that does not match at the end
 * empties the store again.
 */
void
memory_save_load(MemoryStore *memory)
{
	int			fd;
	struct stat st;
	SaveHeader	header;
	pg_crc32c	crc;
	pg_crc32c	saved_crc;
	uint64		placed = 0;

	fd = OpenTransientFile(SAVE_FILE, O_RDONLY | PG_BINARY);
	if (fd < 0)
	{
		if (errno != ENOENT)
			ereport(LOG,
					(errcode_for_file_access(),
					 errmsg("could not open \"%s\": %m", SAVE_FILE)));
		return;
	}
	unlink(SAVE_FILE);
	if (fstat(fd, &st) != 0)
	{
		CloseTransientFile(fd);
		ignore_save_file("it could not be read");
		return;
	}
	if (st.st_size < (off_t) (sizeof(SaveHeader) + sizeof(pg_crc32c)))
	{
		CloseTransientFile(fd);
		ignore_save_file("it is too short");
		return;
	}
	if ((uint64) st.st_size > sizeof(SaveHeader) +
		MAX_SAVED_SLOTS * sizeof(MemorySlot) + sizeof(pg_crc32c))
	{
		CloseTransientFile(fd);
		ignore_save_file("it is larger than any save file");
		return;
	}
	if (read(fd, &header, sizeof(header)) != sizeof(header))
	{
		CloseTransientFile(fd);
		ignore_save_file("it could not be read");
		return;
	}
	if (header.magic != SAVE_MAGIC || header.version != SAVE_VERSION ||
		header.slot_size != sizeof(MemorySlot))
	{
		CloseTransientFile(fd);
		ignore_save_file("it is not a save file of this version of ratelimit");
		return;
	}
	if (header.pg_major != PG_VERSION_NUM / 10000)
	{
		CloseTransientFile(fd);
		ignore_save_file(psprintf("it was written by PostgreSQL %u, and this server runs PostgreSQL %d",
								  header.pg_major, PG_VERSION_NUM / 10000));
		return;
	}
	if (header.system_identifier != GetSystemIdentifier())
	{
		CloseTransientFile(fd);
		ignore_save_file("it was saved by another cluster");
		return;
	}
	if (!starts_from_checkpoint(header.checkpoint))
	{
		CloseTransientFile(fd);
		ignore_save_file("it was not written by the shutdown this server starts from");
		return;
	}
	if (header.count > MAX_SAVED_SLOTS ||
		sizeof(SaveHeader) + header.count * sizeof(MemorySlot) + sizeof(pg_crc32c) != st.st_size)
	{
		CloseTransientFile(fd);
		ignore_save_file("its length does not match its header");
		return;
	}

	INIT_CRC32C(crc);
	COMP_CRC32C(crc, &header, sizeof(header));
	if (!read_slots(fd, memory, header.count, &crc, &placed) ||
		read(fd, &saved_crc, sizeof(saved_crc)) != sizeof(saved_crc))
	{
		CloseTransientFile(fd);
		empty_store(memory);
		ignore_save_file("it could not be read");
		return;
	}
	CloseTransientFile(fd);
	FIN_CRC32C(crc);
	if (!EQ_CRC32C(crc, saved_crc))
	{
		empty_store(memory);
		ignore_save_file("its checksum does not match");
		return;
	}
	ereport(LOG,
			(errmsg("ratelimit: loaded %llu of %llu buckets saved at shutdown",
					(unsigned long long) placed,
					(unsigned long long) header.count)));
}

/*
 * A start with the table store: the buckets of the file, if any, are older
 * than anything decided from now on.
 */
void
memory_save_remove(void)
{
	if (unlink(SAVE_FILE) == 0)
		ereport(LOG,
				(errmsg("ratelimit: removed the saved buckets in \"%s\": ratelimit.store is \"table\"",
						SAVE_FILE)));
	else if (errno != ENOENT)
		ereport(LOG,
				(errcode_for_file_access(),
				 errmsg("could not remove \"%s\": %m", SAVE_FILE)));
}
