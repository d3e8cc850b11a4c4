package apachekafka

// ClusterID is clusterID, for the tests.
var ClusterID = clusterID
