package contract

// Device stat names, as `nomad node status -stats` and `nomad alloc status
// -stats` show them: the device plugin reports them, the controller reads
// them back from Nomad (an MPS GPU's load, for relief of overloaded
// shared GPUs).
const (
	StatGPUUtil      = "GPU utilization"
	StatMemUtil      = "Memory utilization"
	StatMemUsed      = "Memory used"
	StatTemperature  = "Temperature"
	StatPower        = "Power"
	StatECCCorrected = "ECC errors corrected"
	StatECCUncorr    = "ECC errors uncorrected"
	StatSMClock      = "SM clock"
	StatMemClock     = "Memory clock"
	StatShareThreads = "MPS thread percentage"
	StatShareMemory  = "MPS memory limit"
	StatShareUsed    = "MPS memory used"
	StatShareUtil    = "MPS utilization"
	// An MPS share's own "GPU utilization", "Memory used" are its task's;
	// its physical GPU's figures, which every client of the GPU moves, go
	// under these names instead. There is no per-share memory bandwidth
	// figure: a share reports the GPU's only, as StatPhysMemUtil.
	StatPhysGPUUtil = "Physical GPU utilization"
	StatPhysMemUtil = "Physical GPU memory utilization"
	StatPhysMemUsed = "Physical GPU memory used"
	// The physical GPU a device is on, per device: Nomad's device groups
	// gather several GPUs (whole GPUs by product, MIG instances by
	// profile), so group attributes cannot say which one.
	StatGPUIndex = "GPU index"
	StatGPUUUID  = "GPU UUID"
)
