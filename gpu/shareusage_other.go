//go:build !unix

package gpu

import (
	"io/fs"
	"os"
)

func openNoFollow(path string) (*os.File, error) { return os.Open(path) }

func fileOwner(fs.FileInfo) (int, bool) { return 0, false }
