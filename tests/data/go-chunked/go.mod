module gochunked

go 1.18
