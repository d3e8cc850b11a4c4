package topics

// DecodeEventOracle decodes value as DecodeEvent does, by the straightforward
// path: every object validated and then split in a second pass
// (decodeObjectTwoPass, not splitObject), every payload through
// encoding/json (not decodeFast). The differential fuzz test compares the
// two.
func DecodeEventOracle(value []byte) (*Event, error) {
	return decodeEvent(value, decodePath{
		object:  decodeObjectTwoPass,
		payload: func(Payload, members) bool { return false },
	}, nil)
}
