/*
 * memory_save.c
 *		The memory store's save file: a clean shutdown saves the live
 *		buckets to SAVE_FILE in the data directory, the next start loads
 *		them.  After a crash or an immediate shutdown the store starts empty,
 *		as the unlogged table does.
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
#define SAVE_VERSION 1

/* The save file: this header, count slots, and a CRC-32C of both. */
typedef struct SaveHeader
{
	uint32		magic;
	uint32		version;
	uint64		system_identifier;	/* a file of another cluster is refused */
	uint32		slot_size;
	uint32		set_slots;
	uint64		count;
} SaveHeader;

static pg_crc32c
save_crc(const SaveHeader *header, const MemorySlot *slots)
{
	pg_crc32c	crc;

	INIT_CRC32C(crc);
	COMP_CRC32C(crc, header, sizeof(SaveHeader));
	COMP_CRC32C(crc, slots, header->count * sizeof(MemorySlot));
	FIN_CRC32C(crc);
	return crc;
}

static void
save_failed(const char *what)
{
	ereport(LOG,
			(errcode_for_file_access(),
			 errmsg("could not %s \"%s\": %m", what, SAVE_FILE_TMP),
			 errdetail("The rate-limit buckets of the memory store are not saved; they start empty.")));
}

/*
 * on_shmem_exit of the postmaster: save the live buckets, but only after a
 * clean shutdown.  An immediate shutdown also exits normally, so the control
 * file tells them apart: only a completed shutdown checkpoint marks it shut
 * down.
 */
void
memory_save_at_exit(int code, Datum arg)
{
	MemoryStore *memory = (MemoryStore *) DatumGetPointer(arg);
	ControlFileData *control;
	bool		crc_ok;
	SaveHeader	header = {0};
	MemorySlot *slots;
	int64		now = GetCurrentTimestamp();
	int			fd;
	int			s;
	int			i;
	pg_crc32c	crc;
	size_t		bytes;

	if (code != 0 || memory == NULL)
		return;
	control = get_controlfile(DataDir, &crc_ok);
	if (!crc_ok || control->state != DB_SHUTDOWNED)
		return;

	slots = palloc_extended(mul_size(mul_size(memory->nsets, SET_SLOTS),
									 sizeof(MemorySlot)),
							MCXT_ALLOC_NO_OOM);
	if (slots == NULL)
		return;
	for (s = 0; s < memory->nsets; s++)
		for (i = 0; i < SET_SLOTS; i++)
		{
			MemorySlot *slot = &memory->sets[s].slots[i];

			if (slot->dboid != InvalidOid && slot->tat_us >= now)
				slots[header.count++] = *slot;
		}
	header.magic = SAVE_MAGIC;
	header.version = SAVE_VERSION;
	header.system_identifier = control->system_identifier;
	header.slot_size = sizeof(MemorySlot);
	header.set_slots = SET_SLOTS;
	crc = save_crc(&header, slots);
	bytes = header.count * sizeof(MemorySlot);

	fd = OpenTransientFilePerm(SAVE_FILE_TMP, O_WRONLY | O_CREAT | O_TRUNC | PG_BINARY,
							   pg_file_create_mode);
	if (fd < 0)
	{
		save_failed("create");
		return;
	}
	if (write(fd, &header, sizeof(header)) != sizeof(header) ||
		(bytes > 0 && write(fd, slots, bytes) != bytes) ||
		write(fd, &crc, sizeof(crc)) != sizeof(crc) ||
		pg_fsync(fd) != 0)
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

/*
 * Load the buckets a clean shutdown saved, then remove the file, so that a
 * crash later starts empty.  Anything that is not exactly a save file of
 * this cluster is logged and ignored.
 */
void
memory_save_load(MemoryStore *memory)
{
	int			fd;
	struct stat st;
	char	   *contents;
	SaveHeader	header;
	MemorySlot *slots;
	pg_crc32c	crc;
	uint64		i;
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
	if (fstat(fd, &st) != 0 ||
		st.st_size < (off_t) (sizeof(SaveHeader) + sizeof(pg_crc32c)))
	{
		CloseTransientFile(fd);
		ignore_save_file("it is too short");
		unlink(SAVE_FILE);
		return;
	}
	contents = palloc_extended(st.st_size, MCXT_ALLOC_NO_OOM);
	if (contents == NULL || read(fd, contents, st.st_size) != st.st_size)
	{
		CloseTransientFile(fd);
		ignore_save_file("it could not be read");
		unlink(SAVE_FILE);
		return;
	}
	CloseTransientFile(fd);
	unlink(SAVE_FILE);

	memcpy(&header, contents, sizeof(header));
	slots = (MemorySlot *) (contents + sizeof(SaveHeader));
	if (header.magic != SAVE_MAGIC || header.version != SAVE_VERSION ||
		header.slot_size != sizeof(MemorySlot) || header.set_slots != SET_SLOTS)
	{
		ignore_save_file("it is not a save file of this version of ratelimit");
		return;
	}
	if (header.system_identifier != GetSystemIdentifier())
	{
		ignore_save_file("it was saved by another cluster");
		return;
	}
	if (header.count > (st.st_size - sizeof(SaveHeader) - sizeof(pg_crc32c)) / sizeof(MemorySlot) ||
		sizeof(SaveHeader) + header.count * sizeof(MemorySlot) + sizeof(pg_crc32c) != st.st_size)
	{
		ignore_save_file("its length does not match its header");
		return;
	}
	memcpy(&crc, contents + st.st_size - sizeof(pg_crc32c), sizeof(crc));
	if (!EQ_CRC32C(crc, save_crc(&header, slots)))
	{
		ignore_save_file("its checksum does not match");
		return;
	}

	for (i = 0; i < header.count; i++)
		if (slots[i].dboid != InvalidOid && slots[i].interval_us > 0 &&
			place_loaded(memory, &slots[i]))
			placed++;
	ereport(LOG,
			(errmsg("ratelimit: loaded %llu of %llu buckets saved at shutdown",
					(unsigned long long) placed,
					(unsigned long long) header.count)));
	pfree(contents);
}
