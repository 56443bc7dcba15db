//! How an error reads to an operator: one line with every cause in it.

/// `error` and each of its causes, joined by `": "`, leaving out a cause whose text the message
/// already holds. A client error shown without its causes says "client error (Connect)" and
/// hides the "connection refused" an operator needs.
#[must_use]
pub fn with_causes(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(inner) = cause {
        let line = inner.to_string();
        if !text.contains(&line) {
            text.push_str(": ");
            text.push_str(&line);
        }
        cause = inner.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Layer(&'static str, Option<Box<Layer>>);

    impl std::fmt::Display for Layer {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }

    impl std::error::Error for Layer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.1.as_deref().map(|l| l as &(dyn std::error::Error + 'static))
        }
    }

    #[test]
    fn every_cause_once_in_order() {
        let inner = Layer("Connection refused", None);
        let middle = Layer("tcp connect error", Some(Box::new(inner)));
        let outer = Layer("client error (Connect)", Some(Box::new(middle)));
        assert_eq!(with_causes(&outer), "client error (Connect): tcp connect error: Connection refused");
        let repeated =
            Layer("connect: Connection refused", Some(Box::new(Layer("Connection refused", None))));
        assert_eq!(
            with_causes(&repeated),
            "connect: Connection refused",
            "a cause already said is not repeated"
        );
    }
}
