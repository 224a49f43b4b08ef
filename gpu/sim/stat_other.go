//go:build !unix

package sim

import "io/fs"

func inode(fs.FileInfo) uint64 { return 0 }
