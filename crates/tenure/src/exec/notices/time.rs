//! The times the metadata services write: RFC 3339 (AWS spot and rebalance notices, OCI), and
//! RFC 2822 / RFC 1123 with or without the weekday (Azure's `NotBefore`, `Mon, 19 Sep 2016
//! 18:29:47 GMT`; AWS scheduled events' `21 Jan 2019 09:00:43 GMT`).

use std::time::SystemTime;

/// `text` as a time, whichever of the services' formats it is in.
///
/// # Errors
///
/// None of them, in one line.
pub fn parse_time(text: &str) -> Result<SystemTime, String> {
    let text = text.trim();
    if let Ok(timestamp) = text.parse::<jiff::Timestamp>() {
        return Ok(SystemTime::from(timestamp));
    }
    jiff::fmt::rfc2822::DateTimeParser::new()
        .parse_timestamp(text)
        .map(SystemTime::from)
        .map_err(|_| format!("`{text}` is not a time (RFC 3339 or RFC 2822)"))
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;

    fn at(seconds: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(seconds)
    }

    #[test]
    fn every_format_of_the_services_is_read() {
        // date -u -d '2016-09-19 18:29:47' +%s
        let azure = at(1_474_309_787);
        assert_eq!(parse_time("Mon, 19 Sep 2016 18:29:47 GMT"), Ok(azure));
        assert_eq!(parse_time("19 Sep 2016 18:29:47 GMT"), Ok(azure));
        assert_eq!(parse_time("2016-09-19T18:29:47Z"), Ok(azure));
        assert_eq!(parse_time("2016-09-19T20:29:47+02:00"), Ok(azure));
        assert_eq!(parse_time("2016-09-19T18:29:47.500Z"), Ok(azure + Duration::from_millis(500)));
        assert!(parse_time("soon").expect_err("not a time").contains("`soon`"));
        assert!(parse_time("").is_err());
    }
}
