package supervisor

import (
	"errors"
	"fmt"
	"os/user"
	"strconv"
)

// LookupUser resolves a task's user (a name, or a numeric uid that exists on
// the node) to what Spec needs: uid, primary gid, supplementary groups
// (including the primary one) and home directory.
func LookupUser(name string) (uid, gid uint32, groups []uint32, home string, err error) {
	var u *user.User
	if _, nerr := strconv.ParseUint(name, 10, 32); nerr == nil {
		u, err = user.LookupId(name)
	} else {
		u, err = user.Lookup(name)
	}
	if err != nil {
		var unknownName user.UnknownUserError
		var unknownID user.UnknownUserIdError
		if errors.As(err, &unknownName) || errors.As(err, &unknownID) {
			return 0, 0, nil, "", fmt.Errorf("user %q does not exist on this node", name)
		}
		return 0, 0, nil, "", fmt.Errorf("look up user %q: %w", name, err)
	}
	uid, err = parseID(u.Uid)
	if err != nil {
		return 0, 0, nil, "", fmt.Errorf("user %q: uid %q: %w", name, u.Uid, err)
	}
	gid, err = parseID(u.Gid)
	if err != nil {
		return 0, 0, nil, "", fmt.Errorf("user %q: gid %q: %w", name, u.Gid, err)
	}
	gids, err := u.GroupIds()
	if err != nil {
		return 0, 0, nil, "", fmt.Errorf("user %q: groups: %w", name, err)
	}
	for _, g := range gids {
		id, err := parseID(g)
		if err != nil {
			return 0, 0, nil, "", fmt.Errorf("user %q: group id %q: %w", name, g, err)
		}
		groups = append(groups, id)
	}
	return uid, gid, groups, u.HomeDir, nil
}

func parseID(s string) (uint32, error) {
	v, err := strconv.ParseUint(s, 10, 32)
	return uint32(v), err
}

// GroupName is the name of a group, for messages.
func GroupName(gid uint32) (string, bool) {
	g, err := user.LookupGroupId(strconv.FormatUint(uint64(gid), 10))
	if err != nil {
		return "", false
	}
	return g.Name, true
}
