/* ratelimit_proxy 1.1 -> 1.2.  A fresh 1.2 install runs
 * ratelimit_proxy--1.1.sql and then this file (the Makefile joins them into
 * ratelimit_proxy--1.2.sql), so both paths make the same objects. */

\echo Use "ALTER EXTENSION ratelimit_proxy UPDATE TO '1.2'" to load this file. \quit
