module github.com/iggy-fluss-sink/transforms/go

go 1.26
