package topics

// DecodeEventOracle decodes value as DecodeEvent did before the throughput
// work: every payload through encoding/json (not fastpayload.go), every
// object validated and then split in a second pass (not splitObject). The
// differential fuzz test compares the two.
func DecodeEventOracle(value []byte) (*Event, error) {
	oracle.Store(true)
	defer oracle.Store(false)
	return DecodeEvent(value)
}
