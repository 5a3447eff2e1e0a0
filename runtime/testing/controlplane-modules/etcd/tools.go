//go:build tools

// Package tools pins the etcd commands that build.sh compiles, so that
// `go mod tidy` keeps every module they need.
package tools

import (
	_ "go.etcd.io/etcd/etcdctl/v3"
	_ "go.etcd.io/etcd/server/v3"
)
