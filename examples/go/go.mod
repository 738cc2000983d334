module github.com/libacc/libacc/examples/go

go 1.24

require github.com/libacc/libacc/bindings/go v1.4.0

replace github.com/libacc/libacc/bindings/go => ../../bindings/go
