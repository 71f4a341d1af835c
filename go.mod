module github.com/spoolmq/spool

go 1.26
