package topics

// DecodeEventOracle decodes value as DecodeEvent did before the payload fast
// path (fastpayload.go): every payload through encoding/json. The
// differential fuzz test compares the two.
func DecodeEventOracle(value []byte) (*Event, error) {
	slowPayloads.Store(true)
	defer slowPayloads.Store(false)
	return DecodeEvent(value)
}
