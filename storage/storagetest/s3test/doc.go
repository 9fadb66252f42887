// Package s3test runs a real S3 for tests: a versitygw on a loopback port
// serving one bucket from a fresh directory (StartS3, StartS3At; the
// binary is named by RECLAIM_TEST_VERSITYGW), a counter of the S3 requests
// a driver sends (S3Counter), and a proxy that stalls chosen requests
// (S3Staller). Importing it registers Distribution's s3aws driver.
package s3test
