# ratelimit: PGXS build.  `make && make install`, then CREATE EXTENSION ratelimit.
EXTENSION = ratelimit
MODULE_big = ratelimit
OBJS = $(patsubst %.c,%.o,$(sort $(wildcard src/*.c)))
DATA = sql/ratelimit--1.0.sql

# pg_regress suites: every sql/*.sql except the install script.
REGRESS = $(sort $(filter-out ratelimit--%,$(basename $(notdir $(wildcard sql/*.sql)))))
REGRESS_OPTS = --inputdir=. --load-extension=pgcrypto

PG_CPPFLAGS = -I$(srcdir)/include -I$(srcdir)/src
PG_CFLAGS = -Wall -Wextra -Werror -Wno-unused-parameter -Wno-missing-field-initializers -Wno-sign-compare

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

$(OBJS): include/gcra.h src/ratelimit.h
src/client_ip.o src/forwarded_parse.o: src/forwarded_parse.h
