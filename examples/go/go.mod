module github.com/libacc/libacc/examples/go

go 1.24

require github.com/libacc/libacc/bindings/go v0.1.0

replace github.com/libacc/libacc/bindings/go => ../../bindings/go
