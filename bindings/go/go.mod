module github.com/libacc/libacc/bindings/go

go 1.24
