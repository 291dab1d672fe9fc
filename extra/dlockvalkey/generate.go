package dlockvalkey

//go:generate go run gen.go
