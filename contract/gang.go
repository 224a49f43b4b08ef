package contract

import (
	"fmt"
	"strconv"
)

// Gangs (docs/design/gangs.md): a batch job whose members run on several
// nodes all at once or not at all. The jobspec says it is one in its
// meta; the controller admits it by scaling its groups from 0 to their
// members; the gpu driver hands each member its peers in the environment.
const (
	// MetaGang, job meta, "true": the job is a gang.
	MetaGang = "nomad_gpu_gang"
	// MetaGangMembers, group meta, an integer ≥ 1: the group's count once
	// the controller admits the gang (the jobspec's count is 0).
	MetaGangMembers = "nomad_gpu_gang_members"
	// MetaGangLocality, job meta, a node attribute interpolation such as
	// "${meta.rack}" or "${node.class}": every member is placed on nodes
	// sharing one value of it.
	MetaGangLocality = "nomad_gpu_gang_locality"
	// MetaGangCheckpoint, job meta, "required" (the default) or "none":
	// whether every GPU task of a member must checkpoint. A gang restarts
	// as one whenever a member fails or is preempted; without checkpoints
	// each restart loses the whole gang's progress, so a gang that
	// accepts that says so.
	MetaGangCheckpoint = "nomad_gpu_gang_checkpoint"
	// MetaGangPinned, job meta, written by the controller: the
	// constraints it added at admission to keep the members in one
	// datacenter and one value of the locality, as JSON {"attr": "value"},
	// taken off again before the next admission.
	MetaGangPinned = "nomad_gpu_gang_pinned"
)

// GangMembers reads a group's MetaGangMembers value: an integer ≥ 1.
// The controller's spec rules and the driver's rendezvous read it alike.
func GangMembers(v string) (int, error) {
	n, err := strconv.Atoi(v)
	switch {
	case err != nil:
		return 0, fmt.Errorf("%q is not an integer; allowed: 1 or more", v)
	case n < 1:
		return 0, fmt.Errorf("%d; allowed: 1 or more", n)
	}
	return n, nil
}

// A reservation's placeholder (docs/design/gangs.md, reservations): a job
// of the controller's, ReservationJobPrefix + the gang's job ID, in the
// gang's namespace, whose meta MetaReservationFor names the gang. Its
// allocations hold the kept GPUs; the controller's other modules leave it
// alone.
const (
	ReservationJobPrefix = "nomad-gpu-reserve-"
	MetaReservationFor   = "nomad_gpu_reservation_for"
	// MetaReservationOwnPriority, job meta of a gang admitted on its
	// reservation, is the gang's own priority: the controller admits it
	// raised above the placeholder and restores this once every member is
	// placed (a new leader too). The key stays: a change of meta would
	// replace the members.
	MetaReservationOwnPriority = "nomad_gpu_reservation_own_priority"
	// MetaReservationPin, job meta of a job handed its reservation, is
	// the ${node.unique.id} pattern of the constraint that kept it to the
	// reserved nodes for the handover; the controller takes that
	// constraint off with the raise. The key stays, as the one above.
	MetaReservationPin = "nomad_gpu_reservation_pin"
)

// Task environment the gpu driver sets for a member of a gang.
const (
	// EnvGangRank is 0 … world size − 1: the members in the job's group
	// order, then allocation index.
	EnvGangRank = "NOMAD_GPU_GANG_RANK"
	// EnvGangWorldSize is the gang's members.
	EnvGangWorldSize = "NOMAD_GPU_GANG_WORLD_SIZE"
	// EnvGangMasterAddr is rank 0's node address.
	EnvGangMasterAddr = "NOMAD_GPU_GANG_MASTER_ADDR"
	// EnvGangMasterPort is rank 0's port labelled GangRendezvousPort.
	EnvGangMasterPort = "NOMAD_GPU_GANG_MASTER_PORT"
	// EnvGangHostfile is a file in the task's local/: one line per
	// member, "<address> slots=<GPUs>" (Open MPI's hostfile).
	EnvGangHostfile = "NOMAD_GPU_GANG_HOSTFILE"
)

// GangRendezvousPort is the label of the port, in the network block of
// the group holding rank 0, that is EnvGangMasterPort.
const GangRendezvousPort = "rendezvous"
